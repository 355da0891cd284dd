"""A stdio MCP server on the official Python SDK (`MCPServer`, mcp==2.3.0) that says where it runs,
for the test of an editor's stdio server on the `namespace` sandbox (tests/compat/acp/editor_mcp.py):
its user id, its working directory, and the value of the environment variable WHOAMI_NOTE (which
the editor passes in the server's `env`).

    python whoami_server.py
"""

import json
import os

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("whoami", log_level="WARNING")


@mcp.tool()
def whoami() -> str:
    """Reports this process's uid, working directory and WHOAMI_NOTE."""
    return json.dumps({"uid": os.getuid(), "cwd": os.getcwd(), "note": os.environ.get("WHOAMI_NOTE")})


if __name__ == "__main__":
    mcp.run("stdio")
