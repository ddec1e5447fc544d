"""The human side's web page: static files served by ``openbus.daemon.http.web``."""
