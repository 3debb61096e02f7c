"""The MCP bridge: serves tools to MCP clients in both protocol eras, mapping effects to MCP traffic.

It implements `branchc.runtime.Client` over the `mcp` SDK's server session.
"""
