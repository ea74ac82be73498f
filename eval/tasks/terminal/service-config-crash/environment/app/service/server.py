#!/usr/bin/env python3
"""inventory-svc: a tiny HTTP service on a Unix socket.

usage: server.py [CONFIG]   (default: config.ini next to this file)
GET /health -> {"status": "ok", "name": ..., "workers": ..., "items": ...}
GET /items/<sku> -> the item, or 404
"""
import configparser
import json
import logging
import os
import socketserver
import sys
from http.server import BaseHTTPRequestHandler

HERE = os.path.dirname(os.path.abspath(__file__))


def load_config(path):
    cp = configparser.ConfigParser()
    if not cp.read(path):
        raise FileNotFoundError(path)
    server = cp["server"]
    cfg = {
        "socket": os.path.join(HERE, server["socket"]),
        "log_file": os.path.join(HERE, server.get("log_file", "logs/service.log")),
        "name": cp["app"]["name"],
        "workers": cp["app"].getint("workers"),
        "data_file": os.path.join(HERE, cp["app"]["data_file"]),
    }
    if not 1 <= cfg["workers"] <= 16:
        raise ValueError(f"workers must be 1..16, got {cfg['workers']}")
    return cfg


class Handler(BaseHTTPRequestHandler):
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        cfg, items = self.server.cfg, self.server.items
        if self.path == "/health":
            self._send(200, {"status": "ok", "name": cfg["name"], "workers": cfg["workers"], "items": len(items)})
        elif self.path.startswith("/items/") and self.path[7:] in items:
            self._send(200, items[self.path[7:]])
        else:
            self._send(404, {"error": "not found"})

    def address_string(self):
        return "unix"

    def log_message(self, fmt, *args):
        logging.info("%s", fmt % args)


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main():
    cfg_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "config.ini")
    os.makedirs(os.path.join(HERE, "logs"), exist_ok=True)
    logging.basicConfig(filename=os.path.join(HERE, "logs/service.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_config(cfg_path)
        with open(cfg["data_file"]) as f:
            items = {it["sku"]: it for it in json.load(f)}
    except Exception:
        logging.exception("startup failed")
        raise
    os.makedirs(os.path.dirname(cfg["socket"]), exist_ok=True)
    if os.path.exists(cfg["socket"]):
        os.unlink(cfg["socket"])
    srv = Server(cfg["socket"], Handler)
    srv.cfg, srv.items = cfg, items
    logging.info("%s listening on %s with %d workers", cfg["name"], cfg["socket"], cfg["workers"])
    print(f"listening on {cfg['socket']}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
