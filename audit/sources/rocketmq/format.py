"""RocketMQ commit-log record format: the byte layout, its structs and the small pure helpers.


A store's ``commitlog/`` holds files named by their absolute start offset (20 zero-padded digits), 1 GiB
each by default, preallocated and zero-filled. Records follow each other; a record that does not fit in
what is left of a file (with 8 spare bytes) is replaced by a BLANK record and goes to the next file.
Written up in docs/formats/rocketmq-commitlog.md (after the broker's MessageExtEncoder and
CommitLog.checkMessageAndReturnSize).

Record layout. Every integer is big-endian and signed. Offsets are for IPv4 born and store hosts; an
IPv6 host (SYSFLAG bit 0x10 for the born host, 0x20 for the store host) is 16+4 bytes instead of 4+4
and shifts what follows by 12.

====  ==================  ===========  ======  =================================================
 #    field               size         offset  notes
====  ==================  ===========  ======  =================================================
 1    TOTALSIZE           i32          0       whole record, these 4 bytes included
 2    MAGICCODE           i32          4       v1 0xDAA320A7, v2 0xDAA320AB, BLANK 0xCBD43194
 3    BODYCRC             i32          8       zlib.crc32(stored body) & 0x7FFFFFFF
 4    QUEUEID             i32          12
 5    FLAG                i32          16      user flag
 6    QUEUEOFFSET         i64          20      index in the consume queue
 7    PHYSICALOFFSET      i64          28      absolute offset = file start + position
 8    SYSFLAG             i32          36      0x1 compressed, 0x10/0x20 IPv6 born/store host
 9    BORNTIMESTAMP       i64          40      epoch ms
10    BORNHOST            4+4 | 16+4   48      IP bytes, then port i32
11    STORETIMESTAMP      i64          56      epoch ms
12    STOREHOST           4+4 | 16+4   64
13    RECONSUMETIMES      i32          72
14    PREPARED_TX_OFFSET  i64          76
15    BODYLEN + BODY      i32 + n      84      stored as sent (compressed stays compressed)
16    TOPICLEN + TOPIC    v1 i8 | v2 i16 + n   UTF-8; v2 when the topic is longer than 127 bytes
17    PROPLEN + PROPS     i16 + n              UTF-8 ``key 0x01 value 0x02`` repeated
====  ==================  ===========  ======  =================================================

``TOTALSIZE == 91 + 12*bornV6 + 12*storeV6 + v2 + bodyLen + topicLen + propLen`` (calMsgLength). A BLANK
record is only ``[i32 bytes left in the file][i32 0xCBD43194]``; the rest of the file after it may be
anything. Zeros where a TOTALSIZE should be mean the end of the data (the preallocated tail).

The scanner follows the broker's reader (§1.6) and checks each record: length formula, body CRC,
PHYSICALOFFSET. A damaged record ends the reading of its file (the broker's recovery stops there too);
the next file is read normally. A record cut short with nothing but zeros after it is a ``torn_tail``:
a slave receives 32 KiB HA chunks with no regard to record boundaries, so its last record may be partial.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

import pyarrow as pa

MAGIC_V1 = -626843481  # 0xDAA320A7, MessageDecoder.MESSAGE_MAGIC_CODE
MAGIC_V2 = -626843477  # 0xDAA320AB, MESSAGE_MAGIC_CODE_V2 (5.1.0+, topics longer than 127 bytes)
MAGIC_BLANK = -875286124  # 0xCBD43194, CommitLog.BLANK_MAGIC_CODE
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
BASE_LENGTH = 91
"""calMsgLength of a v1 record with IPv4 hosts and empty body, topic and properties."""
V6_EXTRA = 12
END_FILE_MIN_BLANK_LENGTH = 8
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
DEFAULT_FILE_SIZE = 1024 * 1024 * 1024

FRAME = struct.Struct(
    ">i"  # TOTALSIZE
    "i"  # MAGICCODE
)
HEAD = struct.Struct(
    ">i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
"""The fixed head of a record; BORNHOST starts right after it."""
HOST_V4 = struct.Struct(">4si")  # IPv4 address, port
HOST_V6 = struct.Struct(">16si")  # IPv6 address, port
AFTER_STORE_HOST = struct.Struct(
    ">i"  # RECONSUMETIMES
    "q"  # PREPARED_TX_OFFSET
    "i"  # BODYLEN
)
I64 = struct.Struct(">q")  # STORETIMESTAMP
I16 = struct.Struct(">h")  # v2 TOPICLEN, PROPLEN
I8 = struct.Struct(">b")  # v1 TOPICLEN

OFF_BORN_HOST = HEAD.size  # BORNHOST follows the fixed head; what comes after depends on the host widths

RECORD_SCHEMA = pa.schema(
    [
        ("row_kind", pa.string()),  # record | blank | corrupt_record | torn_tail
        ("phys_offset", pa.int64()),  # absolute: file start + position
        ("size", pa.int64()),  # TOTALSIZE (declared size for blank and damaged rows)
        ("magic", pa.int32()),
        ("version", pa.int8()),  # 1 or 2 for records
        ("body_crc", pa.int32()),
        ("queue_id", pa.int32()),
        ("flag", pa.int32()),
        ("queue_offset", pa.int64()),
        ("sys_flag", pa.int32()),
        ("born_ts", pa.int64()),
        ("born_host", pa.string()),  # "ip:port", "[ipv6]:port"
        ("store_ts", pa.int64()),
        ("store_host", pa.string()),
        ("reconsume_times", pa.int32()),
        ("prepared_tx_offset", pa.int64()),
        ("body_len", pa.int32()),
        ("crc_ok", pa.bool_()),
        ("topic", pa.string()),
        ("uniq_key", pa.string()),  # property UNIQ_KEY: the client's message id
        ("keys", pa.string()),  # property KEYS
        ("tags", pa.string()),  # property TAGS
        ("digest", pa.int64()),  # xxh3_64 (as signed) of the whole record: slave files are byte copies
        ("detail", pa.string()),  # JSON, for blank and damaged rows, and records with a text field not UTF-8
    ]
)
ROW_KINDS = ("record", "blank", "corrupt_record", "torn_tail")


def message_length(*, body_len: int, topic_len: int, prop_len: int, born_v6: bool, store_v6: bool, v2: bool) -> int:
    """calMsgLength: the TOTALSIZE a record with these parts must declare."""
    return BASE_LENGTH + V6_EXTRA * born_v6 + V6_EXTRA * store_v6 + v2 + body_len + topic_len + prop_len


def body_crc(body: bytes | memoryview) -> int:
    """UtilAll.crc32: CRC-32/IEEE masked to 31 bits; 0 for an empty body."""
    return zlib.crc32(body) & 0x7FFFFFFF if len(body) else 0


def parse_properties(text: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: ``k 0x01 v 0x02`` pairs; empty keys or values are dropped."""
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            props[key] = value
    return props


def format_host(raw: bytes) -> str:
    """The 8- or 20-byte host field as ``ip:port`` (``[ipv6]:port``)."""
    port = int.from_bytes(raw[-4:], "big", signed=True)
    ip = ipaddress.ip_address(raw[:-4])
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: 20 zero-padded digits."""
    return f"{offset:020d}"
