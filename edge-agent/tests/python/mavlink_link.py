"""The flight controller's links (tests/python/flight_controller.py): UDP, a
mavlink-router server endpoint, TCP and a pseudo-terminal pair, and its JSON lines on
standard output."""

import json
import os
import selectors
import socket
import sys
import termios
import time
import tty

T0 = time.monotonic()


def now():
    return round(time.monotonic() - T0, 6)


def emit(event, **fields):
    fields = {"ev": event, **fields}
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def host_port(text):
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


class Link:
    """The transport: sends frames to the agent and reads what comes back."""

    def __init__(self, args, selector):
        self.selector = selector
        self.sock = None
        self.master = None
        self.slave = None
        self.clients = []  # server: every peer that has spoken; udpin: the last one
        self.tcp_listener = None
        self.target = None
        self.device = None
        address = None
        if args.udpout:
            self.kind = "udpout"
            self.target = host_port(args.udpout)
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(("127.0.0.1", 0))
            address = "%s:%d" % self.sock.getsockname()
        elif args.udpin or args.server:
            self.kind = "udpin" if args.udpin else "server"
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind(host_port(args.udpin or args.server))
            address = "%s:%d" % self.sock.getsockname()
        elif args.tcp_listen:
            self.kind = "tcp"
            self.tcp_listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tcp_listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp_listener.bind(host_port(args.tcp_listen))
            self.tcp_listener.listen(1)
            self.tcp_listener.setblocking(False)
            selector.register(self.tcp_listener, selectors.EVENT_READ, "accept")
            address = "%s:%d" % self.tcp_listener.getsockname()
        elif args.serial_pty:
            self.kind = "serial"
            self.master, self.slave = os.openpty()
            # Raw on both ends: no echo, no line editing, no CR/LF translation.
            tty.setraw(self.slave)
            tty.setraw(self.master)
            os.set_blocking(self.master, False)
            self.device = os.ttyname(self.slave)
            selector.register(self.master, selectors.EVENT_READ, "serial")
        else:
            raise SystemExit("choose a link: --udpout, --udpin, --server, --tcp-listen or --serial-pty")
        if self.sock is not None:
            self.sock.setblocking(False)
            selector.register(self.sock, selectors.EVENT_READ, "udp")
        emit("ready", link=self.kind, address=address, device=self.device)

    def can_send(self):
        if self.kind == "udpout" or self.kind == "serial":
            return True
        return bool(self.clients)

    def send(self, frame):
        """Sends one frame (or any bytes); False when there was nobody to send to."""
        if self.kind == "udpout":
            return self._sendto(frame, self.target)
        if self.kind in ("udpin", "server"):
            if not self.clients:
                return False
            return all([self._sendto(frame, client) for client in self.clients])
        if self.kind == "tcp":
            if not self.clients:
                return False
            try:
                self.clients[0].sendall(frame)
                return True
            except OSError:
                self._drop_tcp()
                return False
        try:
            if os.write(self.master, frame) == len(frame):
                return True
        except BlockingIOError:
            pass
        # Nobody reads the slave (the agent has not opened it yet): a wire loses what
        # nobody listens to, so the queue is emptied (a cut frame with it) and the
        # frame written whole.
        termios.tcflush(self.slave, termios.TCIFLUSH)
        try:
            return os.write(self.master, frame) == len(frame)
        except BlockingIOError:
            return False

    def _sendto(self, frame, address):
        try:
            self.sock.sendto(frame, address)
            return True
        except OSError:
            # ICMP port unreachable of an earlier datagram (the agent not up yet).
            return False

    def _drop_tcp(self):
        for client in self.clients:
            self.selector.unregister(client)
            client.close()
        self.clients = []

    def on_ready(self, what):
        """Reads what is waiting; returns the bytes (possibly empty)."""
        if what == "accept":
            client, _ = self.tcp_listener.accept()
            self._drop_tcp()
            client.setblocking(False)
            self.clients = [client]
            self.selector.register(client, selectors.EVENT_READ, "tcp")
            return b""
        if what == "udp":
            try:
                data, sender = self.sock.recvfrom(65536)
            except OSError:
                return b""
            if self.kind == "udpin":
                self.clients = [sender]
            elif self.kind == "server" and sender not in self.clients:
                self.clients.append(sender)
            return data
        if what == "tcp":
            try:
                data = self.clients[0].recv(65536)
            except BlockingIOError:
                return b""
            except OSError:
                data = b""
            if not data:
                self._drop_tcp()
            return data
        try:
            return os.read(self.master, 65536)
        except (BlockingIOError, OSError):
            return b""
