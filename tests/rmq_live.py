"""A RocketMQ master and slave as live brokers write them, in a process of its own, for tests only.

    python -m tests.rmq_live ROOT --seconds 20 --file-size 65536 --keep 6 --lag 0.05

The master appends records (several topics and queues, bodies of varied sizes, UNIQ_KEY/KEYS/TAGS) into
ROOT/m/commitlog as a broker does into its mmap: byte by byte visible, a record sometimes caught half
written, a BLANK and a roll at a file's end, and the next file preallocated (zeros) as soon as a file
is started (AllocateMappedFileService). The slave (ROOT/s) follows `--lag` seconds behind with byte
copies of the master's log in HA chunks of up to 32 KiB cut anywhere, preallocating its next file too.
`--history N` writes N files at once first. With `--keep`, each side deletes its oldest file once it
holds more (fileReservedTime), the slave `--delete-skew` seconds after the master. Planted divergences:
`--change K` (the slave holds record K with another body), `--skip K` (the slave never got record K:
from there on it writes the records at its own offsets), `--stuck-after S` (the slave stops following).
`--no-slave` writes the master only.

ROOT/progress.json says what was written so far: the master's records (offset, size, UNIQ_KEY), the
slave's end, the files deleted, so a test can tell where a planted divergence lies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import deque
from pathlib import Path
from typing import Any

from audit.local.rocketmq_commitlog import Message, blank_record, encode, encoded_length
from audit.sources.rocketmq.format import END_FILE_MIN_BLANK_LENGTH, offset_to_file_name

HA_CHUNK = 32 * 1024
TOPICS = ("TopicTest", "orders", "payments-%RETRY%group", "audit_log")


def message(i: int, rng: random.Random, *, host: str = "10.0.0.2:10911", tag: str = "live") -> Message:
    """Message i: its topic, queue and body size vary; UNIQ_KEY, KEYS and TAGS as a producer sets them."""
    topic = TOPICS[i % len(TOPICS)]
    now = int(time.time() * 1000)
    size = rng.choice((0, 10, 100, 700, 3000))
    return Message(
        topic=topic,
        body=f"{tag} {i:08d} ".encode() + rng.randbytes(size),
        properties={"UNIQ_KEY": f"{tag.upper()}{i:024X}", "KEYS": f"key-{i}", "TAGS": f"Tag{i % 3}", "WAIT": "true"},
        queue_id=i % 4,
        queue_offset=i // 4,
        born_ts=now - 3,
        born_host="10.0.0.7:50123",
        store_ts=now,
        store_host=host,
    )


class Log:
    """One side's commit-log directory, written like a broker's mapped files."""

    def __init__(self, store: Path, file_size: int) -> None:
        self.dir = store / "commitlog"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_size = file_size
        self.deleted: list[str] = []

    def path(self, offset: int) -> Path:
        return self.dir / offset_to_file_name(offset - offset % self.file_size)

    def _start_file(self, offset: int) -> None:
        """The file holding `offset` exists, and so does the next one (preallocated zeros)."""
        for start in (offset - offset % self.file_size, offset - offset % self.file_size + self.file_size):
            p = self.dir / offset_to_file_name(start)
            if not p.exists():
                with p.open("wb") as fh:
                    fh.truncate(self.file_size)

    def write(self, offset: int, data: bytes) -> None:
        """`data` at absolute `offset`; never across a file's end."""
        self._start_file(offset)
        fd = os.open(self.path(offset), os.O_WRONLY)
        try:
            os.pwrite(fd, data, offset % self.file_size)
        finally:
            os.close(fd)

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.name.isdigit())

    def expire(self, keep: int) -> None:
        """Delete the oldest file while more than `keep` hold data (the preallocated one does not count)."""
        files = self.files()
        while len(files) - 1 > keep:
            files[0].unlink()
            self.deleted.append(files[0].name)
            files = files[1:]


class Master:
    def __init__(self, log: Log, rng: random.Random, host: str) -> None:
        self.log, self.rng, self.host = log, rng, host
        self.offset = 0
        self.records: list[tuple[int, int, str]] = []
        self.messages: list[Message] = []

    def append(self) -> None:
        msg = message(len(self.messages), self.rng, host=self.host)
        size = encoded_length(msg)
        left = self.log.file_size - self.offset % self.log.file_size
        if size + END_FILE_MIN_BLANK_LENGTH > left:
            self.log.write(self.offset, blank_record(left))
            self.offset += left
        data = encode(msg, self.offset)
        cut = self.rng.randrange(1, len(data))  # a reader may see the record half written
        self.log.write(self.offset, data[:cut])
        self.log.write(self.offset + cut, data[cut:])
        self.records.append((self.offset, size, msg.properties["UNIQ_KEY"]))
        self.messages.append(msg)
        self.offset += size


class Slave:
    """HA: byte copies of the master's log up to a point `lag` seconds old; or, past a skipped record, the
    master's messages written at the slave's own offsets."""

    def __init__(self, log: Log, master: Master, args: argparse.Namespace) -> None:
        self.log, self.master, self.args = log, master, args
        self.offset = 0
        self.marks: deque[tuple[float, int, int]] = deque()  # (time, master offset, records)
        self.next_record = 0  # own-offset mode: the next master message to write
        self.changed: int | None = None

    def follow(self, now: float) -> None:
        self.marks.append((now, self.master.offset, len(self.master.records)))
        target, upto_record = self.offset, self.next_record
        while self.marks and self.marks[0][0] <= now - self.args.lag:
            _, target, upto_record = self.marks.popleft()
        skip = self.args.skip
        if skip is not None and upto_record > skip:
            target = min(target, self.master.records[skip][0])  # byte copies up to the skipped record
            if self.offset >= target:
                self._own(upto_record)
                return
        while self.offset < target:
            room = self.log.file_size - self.offset % self.log.file_size
            n = min(target - self.offset, room, self.master.rng.randrange(1, HA_CHUNK))
            src = os.open(self.master.log.path(self.offset), os.O_RDONLY)
            try:
                data = os.pread(src, n, self.offset % self.log.file_size)
            finally:
                os.close(src)
            self.log.write(self.offset, data)
            self.offset += n
        self.next_record = upto_record if skip is None or upto_record <= skip else skip
        self._plant_change()

    def _plant_change(self) -> None:
        k = self.args.change
        if k is None or self.changed is not None or k >= len(self.master.records):
            return
        at, size, _ = self.master.records[k]
        if at + size > self.offset:
            return
        msg = self.master.messages[k]
        body = bytearray(msg.body)
        body[0] ^= 0x20  # same length, another body, a valid CRC: the same message with other bytes
        self.log.write(at, encode(msg.but(body=bytes(body)), at))
        self.changed = at

    def _own(self, upto_record: int) -> None:
        """Past the skipped record the slave writes the messages itself, so its offsets shift."""
        self.next_record = max(self.next_record, self.args.skip + 1)
        for i in range(self.next_record, upto_record):
            msg = self.master.messages[i]
            size = encoded_length(msg)
            left = self.log.file_size - self.offset % self.log.file_size
            if size + END_FILE_MIN_BLANK_LENGTH > left:
                self.log.write(self.offset, blank_record(left))
                self.offset += left
            self.log.write(self.offset, encode(msg, self.offset))
            self.offset += size
        self.next_record = max(self.next_record, upto_record)


def _progress(root: Path, master: Master, slave: Slave | None) -> None:
    state: dict[str, Any] = {
        "master_offset": master.offset,
        "records": master.records,
        "master_deleted": master.log.deleted,
        "slave_offset": None if slave is None else slave.offset,
        "slave_deleted": [] if slave is None else slave.log.deleted,
        "changed_at": None if slave is None else slave.changed,
    }
    tmp = root / "progress.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(root / "progress.json")


def run(args: argparse.Namespace) -> None:
    root = Path(args.root)
    rng = random.Random(args.seed)
    master = Master(Log(root / "m", args.file_size), rng, args.host)
    slave = None if args.no_slave else Slave(Log(root / "s", args.file_size), master, args)
    while master.offset < args.history * args.file_size:  # a log with a past, written at once
        master.append()
    started = time.monotonic()
    last_expiry = {"m": started, "s": started + args.delete_skew}
    while (now := time.monotonic()) - started < args.seconds:
        for _ in range(rng.randrange(1, 6)):
            master.append()
        if slave is not None and (args.stuck_after is None or now - started < args.stuck_after):
            slave.follow(now)
        if args.keep:
            for side, log in (("m", master.log), ("s", None if slave is None else slave.log)):
                if log is not None and now - last_expiry[side] >= args.delete_every:
                    log.expire(args.keep)
                    last_expiry[side] = now
        _progress(root, master, slave)
        time.sleep(args.sleep)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--file-size", type=int, default=64 * 1024)
    p.add_argument("--lag", type=float, default=0.05)
    p.add_argument("--keep", type=int, default=0)
    p.add_argument("--history", type=int, default=0, help="files the master writes at once before going on live")
    p.add_argument("--delete-every", type=float, default=0.5)
    p.add_argument("--delete-skew", type=float, default=0.25)
    p.add_argument("--sleep", type=float, default=0.002)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host", default="10.0.0.2:10911")
    p.add_argument("--change", type=int)
    p.add_argument("--skip", type=int)
    p.add_argument("--stuck-after", type=float)
    p.add_argument("--no-slave", action="store_true")
    run(p.parse_args())


if __name__ == "__main__":
    main()
