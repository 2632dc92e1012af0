"""N HTTP/2 streams at once on one connection, for the end-to-end tests.

    streams.py HOST:PORT PATH_PREFIX N [--header NAME=VALUE]... [--timeout S]

Opens one plaintext HTTP/2 connection (prior knowledge, no upgrade), writes the
HEADERS of N GET requests in a single write, the i-th to PATH_PREFIX followed
by i, so the proxy reads them all at once, then reads until every stream has
ended. Prints one JSON list of the N response statuses, in the streams' order.
The h2 package (pinned by the Makefile) does the framing and HPACK.
"""

import argparse
import json
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("prefix")
    parser.add_argument("n", type=int)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    extra = [tuple(h.split("=", 1)) for h in args.header]

    sock = socket.create_connection((host, int(port)), timeout=args.timeout)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    # Room for every stream at once, whatever the server's first SETTINGS say.
    conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: args.n})
    sock.sendall(conn.data_to_send())

    streams = []
    for i in range(args.n):
        sid = conn.get_next_available_stream_id()
        headers = [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", args.target),
            (":path", f"{args.prefix}{i}"),
        ] + extra
        conn.send_headers(sid, headers, end_stream=True)
        streams.append(sid)
    sock.sendall(conn.data_to_send())

    status = {}
    ended = set()
    deadline = time.monotonic() + args.timeout
    while len(ended) < args.n and time.monotonic() < deadline:
        data = sock.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                ended.add(event.stream_id)
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        sock.sendall(conn.data_to_send())
    sock.close()
    print(json.dumps([status.get(sid, 0) for sid in streams]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
