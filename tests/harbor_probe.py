"""Run in the Harbor venv by tests (`python tests/harbor_probe.py REPO MODE`, JSON on stdin, JSON on stdout), no job:
`agent`: harbor_plugins/bash_tool_agent.py's BashToolAgent run once per given chat-completion message, against a
loopback server answering that message then "Done.", in an environment that records the commands it is asked to run;
`terminus`: Harbor's own Terminus-2 JSON parser (TerminusJSONPlainParser) on each given text."""

import asyncio
import json
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

sys.path.insert(0, sys.argv[1])


def run_agent(message: dict) -> dict:
    from harbor.models.agent.context import AgentContext

    from harbor_plugins.bash_tool_agent import BashToolAgent

    answers = [message, {"role": "assistant", "content": "Done."}]

    class Server(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"choices": [{"message": answers.pop(0)}], "usage": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Result:
        stdout, stderr, return_code = "ok\n", "", 0

    class Environment:
        class task_env_config:
            workdir = "/app"

        def __init__(self):
            self.commands = []

        async def exec(self, command, cwd=None, timeout_sec=None):
            self.commands.append(command)
            return Result()

    server = HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logs = Path(tempfile.mkdtemp())
    agent = BashToolAgent(logs, "hosted_vllm/policy", api_base=f"http://127.0.0.1:{server.server_port}/v1")
    environment = Environment()
    asyncio.run(agent.run("Do the task.", environment, AgentContext()))
    server.shutdown()
    steps = json.loads((logs / "trajectory.json").read_text())["steps"]
    return {"commands": environment.commands, "reasoning": [s.get("reasoning_content") for s in steps],
            "messages": [s.get("message") for s in steps]}


def parse_terminus(text: str) -> dict:
    from harbor.agents.terminus_2.terminus_json_plain_parser import TerminusJSONPlainParser

    result = TerminusJSONPlainParser().parse_response(text)
    return {"keystrokes": [c.keystrokes for c in result.commands], "error": result.error, "warning": result.warning,
            "analysis": result.analysis}


if __name__ == "__main__":
    items = json.load(sys.stdin)
    print(json.dumps([run_agent(item) if sys.argv[2] == "agent" else parse_terminus(item) for item in items]))
