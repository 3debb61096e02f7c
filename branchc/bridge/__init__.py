"""The MCP bridge (not built yet): it will serve tools to MCP clients in both protocol eras,
mapping effects to MCP traffic, by implementing `branchc.runtime.Client` over the `mcp` SDK.
"""
