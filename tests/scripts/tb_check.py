#!/usr/bin/python3
"""Read thx's TensorBoard event files with readers that share no code with thx, and check them
against the run's metrics.jsonl.

The Event and Summary messages are declared here, from TensorFlow's published field numbers
(event.proto: wall_time 1, step 2, file_version 3, summary 5; summary.proto: Summary.value 1,
Value.tag 1, Value.simple_value 2), and parsed by Google's protobuf runtime (Debian's
python3-protobuf). The TFRecord framing is checked with Debian's python3-crc32c.

Usage: tb_check.py RUN_DIR   (RUN_DIR/tb/events.out.tfevents.* and RUN_DIR/metrics.jsonl)
The files are read in name order as one run, as TensorBoard reads a folder, with its rule for
restarts (file_version 2): a SessionLog START (event field 7, its status field 1; START = 1)
after the folder's first drops every scalar read so far at its step or later.
Checks:
  - every record's length and data CRCs (masked CRC-32C) are right, and nothing trails;
  - the first event of each file has file_version "brain.Event:2";
  - every numeric value of every metrics.jsonl record is a scalar at the same step, tagged
    [task/]train/<key> or [task/]eval/<key...>, equal to the value as float32;
  - no tag has two values at one step, and no scalar exists that metrics.jsonl does not have.
Exit 0 if all hold; 1 with the first difference otherwise.
"""
import glob
import os
import struct
import sys

import crc32c
from metrics_scalars import difference
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
START = 1  # SessionLog.SessionStatus.START


def messages():
    fd = descriptor_pb2.FileDescriptorProto(name="tb_check_event.proto", package="tbcheck", syntax="proto3")
    value = fd.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    # In a oneof, as in TensorFlow's summary.proto: a zero is written, and an absent value is no
    # scalar (what tensorboard's own reader does), not a zero.
    value.oneof_decl.add(name="value")
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    summary = fd.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tbcheck.Value")
    event = fd.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.Summary")
    session_log = fd.message_type.add(name="SessionLog")  # its enum read as the int it is on the wire
    session_log.field.add(name="status", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    event.field.add(name="session_log", number=7, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.SessionLog")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("tbcheck.Event"))


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    blob = open(path, "rb").read()
    at = 0
    while at < len(blob):
        if at + 12 > len(blob):
            raise ValueError(f"{path}: {len(blob) - at} trailing bytes")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if length_crc != masked(header):
            raise ValueError(f"{path}@{at}: length CRC {length_crc:#x} != {masked(header):#x}")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if len(data) != length or data_crc != masked(data):
            raise ValueError(f"{path}@{at}: data CRC {data_crc:#x} != {masked(data):#x}")
        yield data
        at += 16 + length


def main(run):
    Event = messages()
    files = sorted(glob.glob(os.path.join(run, "tb", "events.out.tfevents.*")))
    if not files:
        return f"{run}/tb: no event files"
    got = {}  # (step, tag) -> value
    started, restarts = False, 0
    for path in files:
        for i, data in enumerate(records(path)):
            e = Event()
            e.ParseFromString(data)
            if i == 0:
                if e.file_version != "brain.Event:2":
                    return f"{path}: first event has file_version {e.file_version!r}"
                continue
            if e.HasField("session_log") and e.session_log.status == START:
                if started:  # a restart: what was read at this step or later goes
                    got = {k: v for k, v in got.items() if k[0] < e.step}
                    restarts += 1
                started = True
            for v in e.summary.value:
                if v.HasField("simple_value"):
                    if (e.step, v.tag) in got:
                        return f"{path}: {v.tag} at step {e.step} twice ({got[(e.step, v.tag)]}, {v.simple_value})"
                    got[(e.step, v.tag)] = v.simple_value
    error = difference(got, run)
    if error:
        return error
    print(f"{run}: {len(files)} event file(s), {restarts} restart(s), {len(got)} scalars, all CRCs and values agree")
    return None


if __name__ == "__main__":
    error = main(sys.argv[1])
    if error:
        print(f"tb_check: {error}", file=sys.stderr)
        sys.exit(1)
