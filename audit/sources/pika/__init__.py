"""Kind `pika`: a Pika master and its slave, audited from their binlog files."""

from __future__ import annotations
