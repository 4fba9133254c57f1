"""Data sources: CSV, Parquet and TFRecord files, directories, globs and gs:// or s3:// objects,
and the synthetic click-through table, read as Arrow record batches (ingest), listed and
fingerprinted (fingerprint), their columns checked before a run (the CLI)."""
