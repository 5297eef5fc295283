"""The Lua script ``sink_to_redis`` writes a batch with, and its arguments."""

from __future__ import annotations

from typing import Any

__all__ = ["XADD_MANY", "script_args"]

# One round trip and one reply for a whole batch of XADDs: redis-py spends
# several microseconds of Python per command it packs and per reply it parses,
# so a prototype read-map-write loop measured 5.7 us of client CPU an entry
# with this script against 12.8 with pipelined XADDs (benchmarks/README.md).
# KEYS: the stream, then the hash recording per writer the number of the
# last element written. ARGV: the writer ('' to number nothing), the number
# of the element before the batch, maxlen ('' for none), '~' or '=', then
# either 'same', the field count, the field names and every entry's values,
# or 'each' and per entry its field count and field/value pairs. An element
# whose number is not above the recorded one was written before a crash:
# it is skipped.
XADD_MANY = """
local key, writer, maxlen, how = KEYS[1], ARGV[1], ARGV[3], ARGV[4]
local base = nil
local last = 0
if writer ~= '' then
  base = tonumber(ARGV[2])
  last = tonumber(redis.call('HGET', KEYS[2], writer) or '0')
end
local n = 0
local function xadd(fields)
  n = n + 1
  if base and base + n <= last then return end
  if maxlen == '' then
    return redis.call('XADD', key, '*', unpack(fields))
  end
  return redis.call('XADD', key, 'MAXLEN', how, maxlen, '*', unpack(fields))
end
if ARGV[5] == 'same' then
  local nf = tonumber(ARGV[6])
  local fields = {}
  local i = 7 + nf
  while i <= #ARGV do
    for j = 1, nf do
      fields[2 * j - 1] = ARGV[6 + j]
      fields[2 * j] = ARGV[i + j - 1]
    end
    xadd(fields)
    i = i + nf
  end
else
  local i = 6
  while i <= #ARGV do
    local nf = tonumber(ARGV[i])
    xadd({unpack(ARGV, i + 1, i + 2 * nf)})
    i = i + 1 + 2 * nf
  end
end
if base and base + n > last then redis.call('HSET', KEYS[2], writer, base + n) end
return n
"""


def script_args(items: list[Any], base: int, writer: str, maxlen: int | None,
                approximate: bool, field: str) -> list[Any]:
    """:data:`XADD_MANY`'s arguments for ``items``, numbered after ``base``.

    Examples
    --------
    >>> script_args([{"n": 1}, {"n": 2}], 0, "", None, True, "data")
    ['', 0, '', '~', 'same', 1, 'n', 1, 2]
    >>> script_args([{"a": 1}, 7], 5, "w", 10, False, "data")
    ['w', 5, 10, '=', 'each', 1, 'a', 1, 1, 'data', 7]
    """
    head: list[Any] = [writer, base, "" if maxlen is None else maxlen,
                       "~" if approximate else "="]
    first = items[0]
    names = tuple(first) if type(first) is dict else ()
    if len(names) == 1 and all(map(_is_dict, items)) and sum(map(len, items)) == len(items):
        # The usual case, one same-named field in every entry: the name
        # once, then only values (redis-py checks every argument it sends).
        try:
            return [*head, "same", 1, names[0], *[x[names[0]] for x in items]]
        except KeyError:
            pass
    elif names and all(type(x) is dict and tuple(x) == names for x in items):
        args = [*head, "same", len(names), *names]
        for x in items:
            args.extend(x.values())
        return args
    args = [*head, "each"]
    extend = args.extend
    for x in items:
        if isinstance(x, dict):
            args.append(len(x))
            for kv in x.items():
                extend(kv)
        else:
            extend((1, field, x))
    return args


def _is_dict(x: Any) -> bool:
    return type(x) is dict
