"""The tunnel client: human login (PAM via a privilege-separated helper), sealed sessions,
and the signed ``X-Tunnel-User`` identity on every request it forwards to the daemon."""
