"""The agents' side: the MCP endpoint at ``/mcp`` and the tools it offers.

The composition root builds one ``ToolRegistry`` from every feature's tool declarations
(``observe.OBSERVE_TOOLS``, ``messaging.mcp_tools.MESSAGING_TOOLS``, …) and one
``McpEndpoint`` over it.
"""
