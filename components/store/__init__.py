"""The served-model store: one model's versions under a serving base (local or gs://),
TF Serving's models.config with its labels, and what is stored with each version for the
next run. Push writes it; fingerprint, validate and evaluate read the version now served."""
