"""Sample file formats: one module per format, each a reader and/or writer of perfctl's Samples."""
