"""The HTTP edge: falcon resources, the error translation, the gunicorn worker."""
