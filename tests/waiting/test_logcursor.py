"""LogCursor: following a log by timestamp, as kubelets serve it (whole-second sinceTime, limitBytes, rotation)."""

from __future__ import annotations

from airflow_elastic.waiting.logcursor import CUT_NOTE, LOG_CHUNK_BYTES, MAX_CHUNK_BYTES, LogCursor, parse_stamp

A, B, C = "2026-03-01T10:00:00.1Z", "2026-03-01T10:00:00.25Z", "2026-03-01T10:00:01.000000001Z"


def test_stamps_compare_by_time_whatever_their_precision():
    assert parse_stamp(A) == ("2026-03-01T10:00:00", 100_000_000)
    assert parse_stamp(A) < parse_stamp(B) < parse_stamp(C)
    assert parse_stamp("2026-03-01T10:00:00Z") == ("2026-03-01T10:00:00", 0)
    assert parse_stamp("not a stamp") is None


def test_a_repeated_second_is_shown_once_and_lines_sharing_a_stamp_are_counted():
    cursor = LogCursor()
    assert cursor.take(f"{A} one\n{A} two\n").lines == ["one", "two"]
    assert cursor.since_time() == "2026-03-01T10:00:00Z"  # whole seconds, as the kubelet gets them
    # The next reply starts at that second again: the two lines already shown are skipped, the third one is new.
    assert cursor.take(f"{A} one\n{A} two\n{A} three\n{B} four\n").lines == ["three", "four"]
    assert cursor.take(f"{A} one\n{A} two\n{A} three\n{B} four\n{C} five\n").lines == ["five"]


def test_rotation_changes_nothing():
    cursor = LogCursor()
    cursor.take(f"{A} one\n{B} two\n")
    assert cursor.take(f"{C} three\n").lines == ["three"]  # the served file started over after rotation


def test_an_unfinished_line_waits_unless_the_container_stopped():
    cursor = LogCursor()
    assert cursor.take(f"{A} one\n{B} tw").lines == ["one"]
    assert cursor.take(f"{A} one\n{B} two\n{C} thr").lines == ["two"]
    assert cursor.take(f"{C} thr", final=True).lines == ["thr"]


def test_a_second_longer_than_the_limit_widens_the_next_request_and_then_moves_on():
    cursor = LogCursor(limit=32)
    first = cursor.take(f"{A} 0123456789abcdef0123")  # cut at 32 bytes in the first line
    assert (first.lines, first.more, cursor.limit) == ([], True, 64)
    done = cursor.take(f"{A} 0123456789abcdef0123456789\n{B} x\n")
    assert done.lines == ["0123456789abcdef0123456789", "x"] and cursor.limit == LOG_CHUNK_BYTES


def test_a_line_longer_than_the_largest_request_is_shown_cut():
    cursor = LogCursor(limit=MAX_CHUNK_BYTES)
    text = f"{A} " + "x" * MAX_CHUNK_BYTES
    chunk = cursor.take(text[:MAX_CHUNK_BYTES])
    assert chunk.lines[0].endswith(CUT_NOTE) and cursor.stamp == parse_stamp(A)


def test_a_resumed_stream_skips_what_the_dropped_one_showed():
    cursor = LogCursor()
    assert cursor.stream_request(100).tail_lines == 100 and cursor.stream_request(100).follow
    assert cursor.take_streamed(f"{A} one\n{A} two\n") == ["one", "two"]
    request = cursor.stream_request(100)
    assert (request.since_time, request.tail_lines, request.limit_bytes) == ("2026-03-01T10:00:00Z", None, None)
    # The reopened stream starts at that second again: what was shown is skipped, the rest follows once.
    assert cursor.take_streamed(f"{A} one\n{A} two\n{B} three\n") == ["three"]
    assert cursor.take_streamed(f"{C} last line, unfinished") == ["last line, unfinished"]
