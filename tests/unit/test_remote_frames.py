"""The frames of the remote WebGPU implementations' protocol (webgpu_backend/gpu/remote.py),
without a host: what the client sends and reads back, and a host's garbage as HostGone."""

from __future__ import annotations

import pytest

from webgpu_backend.gpu.remote import HostGone, decode_frame, encode_frame, frame_length


def test_frame_round_trip_keeps_message_and_blob() -> None:
    blob = bytes(range(256)) * 3
    frame = encode_frame({"cmds": [{"op": "run", "nbytes": 4}], "text": "é"}, memoryview(blob))
    assert frame_length(frame) == len(frame)
    assert decode_frame(frame) == ({"cmds": [{"op": "run", "nbytes": 4}], "text": "é"}, blob)


def test_frame_length_waits_for_both_length_words() -> None:
    """A prefix tells the frame's length only once both length words have arrived."""
    frame = encode_frame({"errors": []}, b"abcd")
    json_end = 4 + int.from_bytes(frame[:4], "little")
    for cut in (0, 3, json_end, json_end + 3):
        assert frame_length(frame[:cut]) is None
    assert frame_length(frame[: json_end + 4]) == len(frame)


@pytest.mark.parametrize(
    "garbage",
    [b"Warning: something printed\n", encode_frame({"a": 1}) + b"x", encode_frame([1])],  # type: ignore[arg-type]
    ids=["text", "trailing bytes", "not an object"],
)
def test_garbage_is_a_gone_host(garbage: bytes) -> None:
    with pytest.raises(HostGone):
        decode_frame(garbage)
