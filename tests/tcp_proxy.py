"""A TCP proxy the tests control, to inject faults a real server cannot be asked for on cue.

`cut()` resets every open connection and refuses new ones until `restore()`; `pause()`/`resume()`
stop forwarding without closing anything. Everything else is the real server behind it.
"""

from __future__ import annotations

import socket
import threading

from audit.local.redis_server import free_port


class TcpProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._down = threading.Event()
        self._stopped = threading.Event()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            self.accepted += 1
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _reset(dst)

    def cut(self) -> None:
        """Reset every connection now, and refuse new ones until restore()."""
        self._down.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            _reset(c)

    def restore(self) -> None:
        self._down.clear()

    def close(self) -> None:
        self._stopped.set()
        self.cut()
        self._listener.close()


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    except OSError:
        pass
