"""Peer messaging: the queue, delivery, consent and the tools and views over them.

``MessagingService`` (built by the composition root on the directory's fleet) registers the
gate actions ``message.send``, ``message.status`` and ``messages.list`` and its revocation
hook; ``mcp_tools.MESSAGING_TOOLS`` are its MCP tools; ``delivery`` types at idle.
"""
