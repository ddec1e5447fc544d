"""The control session and routing: front-end requests, threads with origin links, the fast
dispatcher's sends, the feed control blocks on, and control's act tools."""
