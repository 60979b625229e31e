"""The signed runtime package: ``archive`` (the canonical tar.zst, no I/O) and ``archive_dir``;
the signed catalog (``catalog`` with ``canonical_json``, ``ed25519``, ``core_range``,
``catalog_document``, ``catalog_signing``, ``catalog_errors``, ``catalog_state``, no I/O);
``manifests`` (the Hermes package's contract and rendering); the content-addressed store
(``registry`` with ``registry_record``, ``package_root``, ``store_json``, ``registry_errors``);
and ``paths`` (where the operator's state lives on this host). The CLI installs packages with
it and the operator daemon simulator reads its registry; it needs only the kernel."""
