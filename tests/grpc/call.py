"""A generic unary gRPC call with raw bytes, for the end-to-end tests.

    call.py TARGET METHOD [--metadata KEY=VALUE]... [--count N] [--timeout S]

Makes N calls of METHOD (e.g. /meshlimit.test.Echo/Call) on TARGET (host:port,
plaintext HTTP/2) with an empty request and prints one JSON object a line:
{"code": "RESOURCE_EXHAUSTED", "details": ..., "initial_metadata": [[k, v], ...],
"trailing_metadata": [[k, v], ...]}. No generated stubs: the request and the
response are bytes (no serializer), so any backend will do. A trailers-only
response (the form Envoy's local replies take) shows its headers in the
trailing metadata.
"""

import argparse
import json
import sys

import grpc


def pairs(metadata):
    return [[k, v if isinstance(v, str) else v.decode("latin-1")] for k, v in (metadata or ())]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("method")
    parser.add_argument("--metadata", action="append", default=[])
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    metadata = [tuple(m.split("=", 1)) for m in args.metadata]
    with grpc.insecure_channel(args.target) as channel:
        call = channel.unary_unary(
            args.method, request_serializer=None, response_deserializer=None
        )
        for _ in range(args.count):
            try:
                _, c = call.with_call(b"", metadata=metadata, timeout=args.timeout)
            except grpc.RpcError as e:
                c = e
            print(
                json.dumps(
                    {
                        "code": c.code().name,
                        "details": c.details(),
                        "initial_metadata": pairs(c.initial_metadata()),
                        "trailing_metadata": pairs(c.trailing_metadata()),
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
