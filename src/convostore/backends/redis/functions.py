"""The server-side functions of the Redis backend: one Lua library, loaded on every
master with ``FUNCTION LOAD REPLACE``.

Every function works in one owner bucket: ``KEYS[1]`` is the bucket's fence key
(``cs:<namespace>:{<bucket>}:fence``), every key it touches starts with the same
prefix, so the whole call runs in one slot, where the fence is. A write function
checks everything before its first write (Lua is not rolled back) and returns a
refusal as a reply, never as an error; every write function first moves the bucket's
fence, so the ``WAITAOF`` sent after it on the same connection covers whatever earlier
write it found (a replayed append returns an event another client may have written a
moment before).

The keys of a bucket ``P``:

- ``P s:<id>`` hash: a session (fields ``SESSION_FIELDS``, plus ``seq``: its log's
  last seq (the version counts appends, not events), ``cand``: its candidate
  metadata index entries as JSON, ``idx``: the digests it is indexed under, ``bnd``:
  the seq of its newest COMPACTION);
- ``P l:<id>`` hash: its log, field ``<seq>`` the event's fixed columns as JSON, then
  ``<seq>n`` narration, ``<seq>s`` stamp, ``<seq>v`` vector (float32), ``<seq>m`` its
  model, ``<seq>t`` its text tokens (for removal);
- ``P i:<id>`` hash event id -> seq; ``P e`` hash event id -> ``<seq>:<session id>``;
- ``P pa:<id>`` zset of authors by first seq; ``P p:<id>`` zset of part ids;
  ``P vs:<id>`` hash seq -> role letter of the messages with a vector;
- ``P all`` zset of every session id; ``P exp`` zset of ids by expiry;
- ``P oc:<o>``, ``P oca:<o>`` zsets (lex) of an owner's top-level / all session ids;
  ``P oa:<o>``, ``P oaa:<o>`` the same by last activity; ``P cnt:<o>`` hash of counts;
- ``P keys`` set of indexed metadata keys; ``P m:<digest>`` set of session ids;
- ``P t:<token>`` zset of ``<role letter><seq>:<session id>`` scored for text search;
- ``P msgs`` zset (lex) of message ids with content; ``P emb`` hash id -> role letter
  and model;
- ``P vx:<width>:<model>`` vector set of the messages with a vector of that model and
  width (element ``<seq>:<session id>``, attributes ``o``: the owner's number in
  ``P ocode``, ``r``: the role's), on a server with vector sets; else the change feed:
  ``P vrow`` zset of ``<seq>:<session id>`` by row id (``P vrn``), ``P vf`` zset of
  changes ``r<row id>`` / ``s<session id>`` by number (``P vfn``; pruned below ``P vfp``);
- ``P users`` hash user id -> JSON; ``P stats`` hash of counts; ``P fence``;
  ``P frozen`` while the bucket's slot moves (its writes then answer TRYAGAIN).
"""

from __future__ import annotations

from typing import Final

__all__ = ["LIBRARY_NAME", "SESSION_FIELDS", "function", "library"]

LIBRARY_VERSION: Final = 1
LIBRARY_NAME: Final = f"convostore_{LIBRARY_VERSION}"


def function(name: str) -> str:
    """The loaded name of the library's function ``name``."""
    return f"cs{LIBRARY_VERSION}_{name}"


SESSION_FIELDS: Final = (
    "id", "owner", "title", "kind", "part_of", "held_with", "created", "activity",
    "expires", "meta", "version", "stamp", "mcount", "started_by",
)  # fmt: skip

_LIBRARY: Final = """#!lua name=LIBRARY_NAME

local SF = {'id', 'owner', 'title', 'kind', 'part_of', 'held_with', 'created',
  'activity', 'expires', 'meta', 'version', 'stamp', 'mcount', 'started_by'}

local function fence(p) redis.call('INCR', p .. 'fence') end

-- KEYS[1] is the bucket's fence, the one key every write moves: a cluster routes the
-- call by it, and while the bucket's slot moves (all its keys in one MIGRATE) the
-- call runs where the fence, and so every key of the bucket, is.
local function bucket(keys) return string.sub(keys[1], 1, #keys[1] - 5) end

local function okey(owner)
  if owner == nil or owner == false or owner == cjson.null or owner == '' then return '' end
  return '=' .. owner
end

-- Vectors, as the server keeps them searchable: in vector sets (VECTOR_SETS: one per
-- model and width, element '<seq>:<session>', attributes the owner's number in the
-- bucket and the role's), or in a change feed the client's cache follows (``vrow``
-- zset of refs by row id, ``vf`` zset of changes 'r<row id>' / 's<session>' by their
-- number ``vfn``, pruned below ``vfp``).
local VECTOR_SETS = VECTOR_SETS_FLAG
local ROLE_NUMBERS = {u = 1, a = 2, s = 3, t = 4}
local FEED_KEEP = 100000

local function vset_key(p, width, model) return p .. 'vx:' .. width .. ':' .. (model or '') end

-- Numbers need no quoting in a filter expression; owner ids would.
local function owner_code(p, owner, create)
  local o = okey(owner)
  local code = redis.call('HGET', p .. 'ocode', o)
  if code or not create then return code end
  code = redis.call('HINCRBY', p .. 'ocode', '#', 1)
  redis.call('HSET', p .. 'ocode', o, code)
  return code
end

local function feed(p, member)
  local change = redis.call('INCR', p .. 'vfn')
  redis.call('ZADD', p .. 'vf', change, member)
  local extra = redis.call('ZCARD', p .. 'vf') - FEED_KEEP
  if extra > 0 then
    local popped = redis.call('ZPOPMIN', p .. 'vf', extra)
    redis.call('SET', p .. 'vfp', popped[#popped])
  end
end

local function row_id(p, ref)
  local id = redis.call('ZSCORE', p .. 'vrow', ref)
  if id then return id end
  id = redis.call('INCR', p .. 'vrn')
  redis.call('ZADD', p .. 'vrow', id, ref)
  return id
end

-- A message's vector was written (``old_width``, ``old_model``: the one it replaced).
local function vector_written(p, owner, session, seq, letter, model, blob, old_width, old_model)
  local ref = seq .. ':' .. session
  if not VECTOR_SETS then
    feed(p, 'r' .. row_id(p, ref))
    return
  end
  local key = vset_key(p, #blob / 4, model)
  if old_width and vset_key(p, old_width, old_model) ~= key then
    redis.call('VREM', vset_key(p, old_width, old_model), ref)
  end
  local attributes = '{"o":' .. owner_code(p, owner, true) .. ',"r":' .. ROLE_NUMBERS[letter] .. '}'
  -- A float32 vector of its key's width, which no known case refuses (a zero vector is
  -- taken); pcall, as an error here would not undo the writes before it.
  redis.pcall('VADD', key, 'FP32', blob, ref, 'SETATTR', attributes)
end

-- The session's vectors are going with it.
local function vectors_deleted(p, session)
  local lkey = p .. 'l:' .. session
  local held = redis.call('HGETALL', p .. 'vs:' .. session)
  for i = 1, #held, 2 do
    local ref = held[i] .. ':' .. session
    if VECTOR_SETS then
      local width = redis.call('HSTRLEN', lkey, held[i] .. 'v') / 4
      redis.call('VREM', vset_key(p, width, redis.call('HGET', lkey, held[i] .. 'm')), ref)
    else
      local id = redis.call('ZSCORE', p .. 'vrow', ref)
      if id then
        redis.call('ZREM', p .. 'vrow', ref)
        redis.call('ZREM', p .. 'vf', 'r' .. id)
      end
    end
  end
  if not VECTOR_SETS then feed(p, 's' .. session) end
end

local function row(p, id)
  local values = redis.call('HMGET', p .. 's:' .. id, unpack(SF))
  if not values[1] then return false end
  return values
end

local function digest(key, value) return redis.sha1hex(key .. '\\0' .. value) end

-- Replace the session's metadata index entries by its candidates whose key the
-- bucket indexes now.
local function reindex(p, id, cand_json)
  local skey = p .. 's:' .. id
  local old = redis.call('HGET', skey, 'idx')
  if old and old ~= '' then
    for d in string.gmatch(old, '%x+') do redis.call('SREM', p .. 'm:' .. d, id) end
  end
  local kept = {}
  for _, pair in ipairs(cjson.decode(cand_json)) do
    if redis.call('SISMEMBER', p .. 'keys', pair[1]) == 1 then
      local d = digest(pair[1], pair[2])
      redis.call('SADD', p .. 'm:' .. d, id)
      kept[#kept + 1] = d
    end
  end
  redis.call('HSET', skey, 'cand', cand_json, 'idx', table.concat(kept, ' '))
end

local function listings(p, owner, top)
  local o = okey(owner)
  if top then return {p .. 'oc:' .. o, p .. 'oca:' .. o, p .. 'oa:' .. o, p .. 'oaa:' .. o} end
  return {p .. 'oca:' .. o, p .. 'oaa:' .. o}
end

local function count(p, owner, kind, top, by)
  local c = p .. 'cnt:' .. okey(owner)
  redis.call('HINCRBY', c, 'a', by)
  redis.call('HINCRBY', c, 'a:' .. kind, by)
  if top then
    redis.call('HINCRBY', c, 't', by)
    redis.call('HINCRBY', c, 't:' .. kind, by)
  end
end

local function insert(p, s)
  local id = s.id
  local skey = p .. 's:' .. id
  local fields = {'id', id, 'kind', s.kind, 'created', s.created, 'activity', s.activity,
    'meta', s.meta, 'version', '0', 'stamp', s.stamp, 'mcount', '0'}
  for _, name in ipairs({'owner', 'title', 'part_of', 'held_with', 'expires'}) do
    if s[name] ~= nil and s[name] ~= cjson.null then
      fields[#fields + 1] = name
      fields[#fields + 1] = s[name]
    end
  end
  redis.call('HSET', skey, unpack(fields))
  reindex(p, id, s.cand)
  local top = s.part_of == nil or s.part_of == cjson.null
  local lists = listings(p, s.owner, top)
  if top then
    redis.call('ZADD', lists[1], 0, id)
    redis.call('ZADD', lists[2], 0, id)
    redis.call('ZADD', lists[3], s.activity, id)
    redis.call('ZADD', lists[4], s.activity, id)
  else
    redis.call('ZADD', lists[1], 0, id)
    redis.call('ZADD', lists[2], s.activity, id)
    redis.call('ZADD', p .. 'p:' .. s.part_of, 0, id)
  end
  redis.call('ZADD', p .. 'all', 0, id)
  if s.expires ~= nil and s.expires ~= cjson.null then
    redis.call('ZADD', p .. 'exp', s.expires, id)
  end
  count(p, s.owner, s.kind, top, 1)
  redis.call('HINCRBY', p .. 'stats', 's', 1)
end

local function earliest_part(p, parent, held_with)
  for _, part in ipairs(redis.call('ZRANGE', p .. 'p:' .. parent, 0, -1)) do
    if redis.call('HGET', p .. 's:' .. part, 'held_with') == held_with then return part end
  end
  return false
end

-- ARGV[1]: JSON {s = session, mode = 'insert' | 'part', missing = [ids], parent =
-- what is wrong with a parent in another bucket ('missing', 'is_part', 'owner')}
local function insert_session(keys, args)
  local p = bucket(keys)
  local h = cjson.decode(args[1])
  local s = h.s
  fence(p)
  if h.mode == 'part' then
    local parent = row(p, s.part_of)
    if not parent then return {'parent_missing'} end
    if parent[5] then return {'parent_is_part'} end
    local found = earliest_part(p, s.part_of, s.held_with)
    if found then return {'found', row(p, found)} end
    s.owner = parent[2] or cjson.null
  end
  if redis.call('EXISTS', p .. 's:' .. s.id) == 1 then return {'exists'} end
  if #h.missing > 0 then return {'users', cjson.encode(h.missing)} end
  if h.parent ~= nil then return {'parent_' .. h.parent} end
  if h.mode ~= 'part' and s.part_of ~= nil and s.part_of ~= cjson.null then
    local parent = row(p, s.part_of)
    if not parent then return {'parent_missing'} end
    if parent[5] then return {'parent_is_part'} end
    if okey(parent[2]) ~= okey(s.owner) then
      return {'parent_owner'}
    end
  end
  insert(p, s)
  return {'ok', row(p, s.id)}
end

local function get_session(keys, args)
  return row(bucket(keys), args[1])
end

local function set_expiry(p, id, expires)
  if expires == nil or expires == cjson.null then
    redis.call('HDEL', p .. 's:' .. id, 'expires')
    redis.call('ZREM', p .. 'exp', id)
  else
    redis.call('HSET', p .. 's:' .. id, 'expires', expires)
    redis.call('ZADD', p .. 'exp', expires, id)
  end
end

-- ARGV[1]: JSON {id, expected, title, meta, cand, expires, stamp}
local function update_session(keys, args)
  local p = bucket(keys)
  local h = cjson.decode(args[1])
  fence(p)
  local skey = p .. 's:' .. h.id
  local stamp = redis.call('HGET', skey, 'stamp')
  if not stamp then return {'missing'} end
  if stamp ~= h.expected then return {'stale'} end
  if h.title == nil or h.title == cjson.null then
    redis.call('HDEL', skey, 'title')
  else
    redis.call('HSET', skey, 'title', h.title)
  end
  redis.call('HSET', skey, 'meta', h.meta, 'stamp', h.stamp)
  set_expiry(p, h.id, h.expires)
  reindex(p, h.id, h.cand)
  return {'ok', row(p, h.id)}
end

-- ARGV: id, '1' with a title (ARGV[3]) or '0' to clear it, stamp (ARGV[4])
local function set_title(keys, args)
  local p = bucket(keys)
  fence(p)
  local skey = p .. 's:' .. args[1]
  if redis.call('EXISTS', skey) == 0 then return {'missing'} end
  if args[2] == '1' then
    redis.call('HSET', skey, 'title', args[3])
  else
    redis.call('HDEL', skey, 'title')
  end
  redis.call('HSET', skey, 'stamp', args[4])
  return {'ok', row(p, args[1])}
end

local function delete_one(p, id)
  local skey = p .. 's:' .. id
  local s = row(p, id)
  if not s then return 0 end
  for _, part in ipairs(redis.call('ZRANGE', p .. 'p:' .. id, 0, -1)) do delete_one(p, part) end
  local lkey = p .. 'l:' .. id
  local top_seq = tonumber(redis.call('HGET', skey, 'seq') or '0')
  local events, messages = 0, 0
  for seq = 1, top_seq do
    local fixed = redis.call('HGET', lkey, tostring(seq))
    if fixed then
      events = events + 1
      local ev = cjson.decode(fixed)
      redis.call('HDEL', p .. 'e', ev[1])
      if ev[2] == 'MESSAGE' then
        messages = messages + 1
        redis.call('ZREM', p .. 'msgs', ev[1])
        redis.call('HDEL', p .. 'emb', ev[1])
        local ref = string.sub(ev[8], 1, 1) .. seq .. ':' .. id
        local tokens = redis.call('HGET', lkey, seq .. 't')
        if tokens then
          for token in string.gmatch(tokens, '%S+') do
            redis.call('ZREM', p .. 't:' .. token, ref)
          end
        end
      end
    end
  end
  local vectors = redis.call('HLEN', p .. 'vs:' .. id)
  vectors_deleted(p, id)
  local idx = redis.call('HGET', skey, 'idx')
  if idx and idx ~= '' then
    for d in string.gmatch(idx, '%x+') do redis.call('SREM', p .. 'm:' .. d, id) end
  end
  local top = not s[5]
  for _, list in ipairs(listings(p, s[2], top)) do redis.call('ZREM', list, id) end
  if not top then redis.call('ZREM', p .. 'p:' .. s[5], id) end
  redis.call('ZREM', p .. 'all', id)
  redis.call('ZREM', p .. 'exp', id)
  count(p, s[2], s[4], top, -1)
  redis.call('DEL', skey, lkey, p .. 'i:' .. id, p .. 'pa:' .. id, p .. 'p:' .. id,
    p .. 'vs:' .. id)
  redis.call('HINCRBY', p .. 'stats', 's', -1)
  redis.call('HINCRBY', p .. 'stats', 'e', -events)
  redis.call('HINCRBY', p .. 'stats', 'm', -messages)
  redis.call('HINCRBY', p .. 'stats', 'v', -vectors)
  return 1
end

local function delete_session(keys, args)
  fence(bucket(keys))
  return delete_one(bucket(keys), args[1])
end

-- Top-level sessions first, so a part deleted with its parent is not counted.
local function delete_expired(keys, args)
  local p = bucket(keys)
  fence(p)
  local ids = redis.call('ZRANGE', p .. 'exp', '-inf', '(' .. args[1], 'BYSCORE')
  local parts = {}
  local deleted = 0
  for _, id in ipairs(ids) do
    if redis.call('HEXISTS', p .. 's:' .. id, 'part_of') == 1 then
      parts[#parts + 1] = id
    else
      deleted = deleted + delete_one(p, id)
    end
  end
  for _, id in ipairs(parts) do deleted = deleted + delete_one(p, id) end
  return deleted
end

-- ARGV: owner key, order ('c' | 'a'), include parts ('1' | '0'), kind ('' any),
-- after id ('' none), after activity, limit
local function list_sessions(keys, args)
  local p = bucket(keys)
  local o, order, all, kind = args[1], args[2], args[3] == '1', args[4]
  local after_id, after_at, limit = args[5], args[6], tonumber(args[7])
  local found = {}
  local function take(id)
    local s = row(p, id)
    if s and (kind == '' or s[4] == kind) then found[#found + 1] = s end
    return #found >= limit
  end
  local batch = math.max(limit, 32)
  if order == 'c' then
    local key = p .. (all and 'oca:' or 'oc:') .. o
    local upper = after_id == '' and '+' or ('(' .. after_id)
    while true do
      local ids = redis.call('ZRANGE', key, upper, '-', 'BYLEX', 'REV', 'LIMIT', 0, batch)
      for _, id in ipairs(ids) do
        if take(id) then return found end
        upper = '(' .. id
      end
      if #ids < batch then return found end
    end
  end
  local key = p .. (all and 'oaa:' or 'oa:') .. o
  local upper = '+inf'
  if after_id ~= '' then
    local ties = redis.call('ZRANGE', key, after_at, after_at, 'BYSCORE', 'REV')
    for _, id in ipairs(ties) do
      if id < after_id and take(id) then return found end
    end
    upper = '(' .. after_at
  end
  local offset = 0
  while true do
    local ids = redis.call('ZRANGE', key, upper, '-inf', 'BYSCORE', 'REV', 'LIMIT', offset, batch)
    for _, id in ipairs(ids) do
      if take(id) then return found end
    end
    if #ids < batch then return found end
    offset = offset + batch
  end
end

-- ARGV: owner key, include parts, kind ('' any)
local function count_sessions(keys, args)
  local field = (args[2] == '1' and 'a' or 't') .. (args[3] == '' and '' or (':' .. args[3]))
  return tonumber(redis.call('HGET', bucket(keys) .. 'cnt:' .. args[1], field) or '0')
end

local function find_part(keys, args)
  local found = earliest_part(bucket(keys), args[1], args[2])
  if not found then return false end
  return row(bucket(keys), found)
end

local function list_parts(keys, args)
  local p = bucket(keys)
  local rows = {}
  for _, part in ipairs(redis.call('ZRANGE', p .. 'p:' .. args[1], 0, -1)) do
    rows[#rows + 1] = row(p, part)
  end
  return rows
end

local function participants(keys, args)
  return redis.call('ZRANGE', bucket(keys) .. 'pa:' .. args[1], 0, -1)
end

local function by_metadata(keys, args)
  local p = bucket(keys)
  if redis.call('SISMEMBER', p .. 'keys', args[1]) == 0 then return {} end
  local rows = {}
  for _, id in ipairs(redis.call('SMEMBERS', p .. 'm:' .. digest(args[1], args[2]))) do
    local s = row(p, id)
    if s then rows[#rows + 1] = s end
  end
  return rows
end

-- ARGV: keys to index; each new one is backfilled from the sessions' candidates.
local function add_keys(keys, args)
  local p = bucket(keys)
  fence(p)
  local new = {}
  for _, key in ipairs(args) do
    if redis.call('SADD', p .. 'keys', key) == 1 then new[key] = true end
  end
  if next(new) ~= nil then
    for _, id in ipairs(redis.call('ZRANGE', p .. 'all', 0, -1)) do
      local skey = p .. 's:' .. id
      local cand = redis.call('HGET', skey, 'cand')
      if cand and cand ~= '[]' then
        local idx = redis.call('HGET', skey, 'idx') or ''
        for _, pair in ipairs(cjson.decode(cand)) do
          if new[pair[1]] then
            local d = digest(pair[1], pair[2])
            redis.call('SADD', p .. 'm:' .. d, id)
            idx = idx == '' and d or (idx .. ' ' .. d)
          end
        end
        redis.call('HSET', skey, 'idx', idx)
      end
    end
  end
  return redis.call('SMEMBERS', p .. 'keys')
end

local function remove_key(keys, args)
  local p = bucket(keys)
  fence(p)
  if redis.call('SREM', p .. 'keys', args[1]) == 0 then return 0 end
  for _, id in ipairs(redis.call('ZRANGE', p .. 'all', 0, -1)) do
    local skey = p .. 's:' .. id
    local cand = redis.call('HGET', skey, 'cand')
    if cand and cand ~= '[]' then
      local drop = {}
      for _, pair in ipairs(cjson.decode(cand)) do
        if pair[1] == args[1] then
          local d = digest(pair[1], pair[2])
          redis.call('SREM', p .. 'm:' .. d, id)
          drop[d] = true
        end
      end
      local kept = {}
      for d in string.gmatch(redis.call('HGET', skey, 'idx') or '', '%x+') do
        if not drop[d] then kept[#kept + 1] = d end
      end
      redis.call('HSET', skey, 'idx', table.concat(kept, ' '))
    end
  end
  return 1
end

local function stored_event(p, id, seq)
  local lkey = p .. 'l:' .. id
  local v = redis.call('HMGET', lkey, seq, seq .. 'n', seq .. 's', seq .. 'v', seq .. 'm')
  return {tonumber(seq), v[1], v[2], v[3], v[4], v[5]}
end

-- ARGV[1]: session id; ARGV[2]: JSON {ev = expected version or -1, missing = [ids],
-- stamp, act = activity or '', mc = new message count, sb = started by or ''}; then
-- per event: JSON [id, type, role letter, author or '', model, tokens, [[token,
-- score]...], '1' if it has content to embed, stamp], its fixed columns, its vector
-- ('' none).
local function append(keys, args)
  local p = bucket(keys)
  local id = args[1]
  local h = cjson.decode(args[2])
  fence(p)
  local skey = p .. 's:' .. id
  local s = redis.call('HMGET', skey, 'version', 'activity', 'owner', 'part_of', 'started_by',
    'seq')
  if not s[1] then return {'missing'} end
  if #h.missing > 0 then return {'users', cjson.encode(h.missing)} end
  local version = tonumber(s[1])
  local base = tonumber(s[6] or '0')
  local ev = tonumber(h.ev)
  if ev >= 0 and ev ~= version then return {'stale'} end
  local n = (#args - 2) / 3
  local metas = {}
  local seen = {}
  for i = 1, n do
    local m = cjson.decode(args[3 + (i - 1) * 3])
    metas[i] = m
    local at = redis.call('HGET', p .. 'e', m[1])
    if at then
      local colon = string.find(at, ':', 1, true)
      local owner_session = string.sub(at, colon + 1)
      if owner_session == id and ev < 0 then
        return {'replay', stored_event(p, id, string.sub(at, 1, colon - 1))}
      end
      return {'conflict', m[1], owner_session == id and '1' or '0'}
    end
    if seen[m[1]] then return {'conflict', m[1], '1'} end
    seen[m[1]] = true
  end
  local lkey = p .. 'l:' .. id
  local ikey = p .. 'i:' .. id
  local messages, vectors = 0, 0
  for i = 1, n do
    local m = metas[i]
    local seq = tostring(base + i)
    local fixed, vector = args[4 + (i - 1) * 3], args[5 + (i - 1) * 3]
    local fields = {seq, fixed}
    redis.call('HSET', p .. 'e', m[1], seq .. ':' .. id)
    redis.call('HSET', ikey, m[1], seq)
    if m[2] == 'COMPACTION' then redis.call('HSET', skey, 'bnd', seq) end
    if m[2] == 'MESSAGE' then
      messages = messages + 1
      if m[4] ~= '' then redis.call('ZADD', p .. 'pa:' .. id, 'NX', seq, m[4]) end
      if m[6] ~= '' then
        fields[#fields + 1] = seq .. 't'
        fields[#fields + 1] = m[6]
        local ref = m[3] .. seq .. ':' .. id
        for _, pair in ipairs(m[7]) do redis.call('ZADD', p .. 't:' .. pair[1], pair[2], ref) end
      end
      if m[8] == '1' then
        redis.call('ZADD', p .. 'msgs', 0, m[1])
        redis.call('HSET', p .. 'emb', m[1], m[3] .. (vector ~= '' and m[5] or ''))
      end
      if vector ~= '' then
        vectors = vectors + 1
        fields[#fields + 1] = seq .. 'v'
        fields[#fields + 1] = vector
        fields[#fields + 1] = seq .. 'm'
        fields[#fields + 1] = m[5]
        redis.call('HSET', p .. 'vs:' .. id, seq, m[3])
        vector_written(p, s[3], id, seq, m[3], m[5], vector)
      end
      fields[#fields + 1] = seq .. 's'
      fields[#fields + 1] = m[9]
    end
    redis.call('HSET', lkey, unpack(fields))
  end
  local updates = {'version', tostring(version + 1), 'seq', tostring(base + n), 'stamp', h.stamp}
  if h.mc ~= '0' then
    updates[#updates + 1] = 'mcount'
    updates[#updates + 1] = tostring(tonumber(redis.call('HGET', skey, 'mcount')) + tonumber(h.mc))
  end
  if h.sb ~= '' and not s[5] then
    updates[#updates + 1] = 'started_by'
    updates[#updates + 1] = h.sb
  end
  if h.act ~= '' and tonumber(h.act) > tonumber(s[2]) then
    updates[#updates + 1] = 'activity'
    updates[#updates + 1] = h.act
    local o = okey(s[3])
    redis.call('ZADD', p .. 'oaa:' .. o, h.act, id)
    if not s[4] then redis.call('ZADD', p .. 'oa:' .. o, h.act, id) end
  end
  redis.call('HSET', skey, unpack(updates))
  redis.call('HINCRBY', p .. 'stats', 'e', n)
  if messages > 0 then redis.call('HINCRBY', p .. 'stats', 'm', messages) end
  if vectors > 0 then redis.call('HINCRBY', p .. 'stats', 'v', vectors) end
  return {'ok', base}
end

-- ARGV: session id, first seq, last seq (clamped to the log), or a count, a floor and
-- 'tail': the log's last seq, the newest boundary's seq (0: none), then each event as
-- stored_event gives, in seq order.
local function read_range(keys, args)
  local p = bucket(keys)
  local s = redis.call('HMGET', p .. 's:' .. args[1], 'id', 'seq', 'bnd')
  if not s[1] then return {-1, 0} end
  local top = tonumber(s[2] or '0')
  local out = {top, tonumber(s[3] or '0')}
  local first, last = math.max(tonumber(args[2]), 1), math.min(tonumber(args[3]), top)
  if args[4] == 'tail' then
    -- ARGV[2] events at most, ending with the last one, none before seq ARGV[3].
    first, last = math.max(top - tonumber(args[2]) + 1, tonumber(args[3]), 1), top
  end
  for seq = first, last do
    out[#out + 1] = stored_event(p, args[1], tostring(seq))
  end
  return out
end

-- ARGV: session id, event ids: the events of that log with those ids.
local function read_ids(keys, args)
  local p = bucket(keys)
  local out = {}
  for i = 2, #args do
    local seq = redis.call('HGET', p .. 'i:' .. args[1], args[i])
    if seq then out[#out + 1] = stored_event(p, args[1], seq) end
  end
  return out
end

local function version(keys, args)
  return tonumber(redis.call('HGET', bucket(keys) .. 's:' .. args[1], 'version') or '0')
end

-- ARGV: session id, message id, '1' with a narration (ARGV[4]) or '0', stamp (ARGV[5])
local function set_narration(keys, args)
  local p = bucket(keys)
  fence(p)
  local seq = redis.call('HGET', p .. 'i:' .. args[1], args[2])
  if not seq then return 0 end
  local lkey = p .. 'l:' .. args[1]
  if redis.call('HEXISTS', lkey, seq .. 's') == 0 then return 0 end
  if args[3] == '1' then
    redis.call('HSET', lkey, seq .. 'n', args[4])
  else
    redis.call('HDEL', lkey, seq .. 'n')
  end
  redis.call('HSET', lkey, seq .. 's', args[5])
  return 1
end

local function pending_of(p, model, roles, after, limit)
  local out = {}
  local lower = after == '' and '-' or ('(' .. after)
  while true do
    local ids = redis.call('ZRANGE', p .. 'msgs', lower, '+', 'BYLEX', 'LIMIT', 0, 256)
    if #ids == 0 then return out end
    local values = redis.call('HMGET', p .. 'emb', unpack(ids))
    for i, id in ipairs(ids) do
      local v = values[i]
      local wanted = v and string.find(roles, string.sub(v, 1, 1), 1, true)
      if wanted and string.sub(v, 2) ~= model then
        out[#out + 1] = id
        if limit > 0 and #out >= limit then return out end
      end
      lower = '(' .. id
    end
  end
end

-- ARGV: model, role letters, after ('' none), limit: message ids, with session id,
-- role letter and content.
local function pending(keys, args)
  local p = bucket(keys)
  local out = {}
  for _, id in ipairs(pending_of(p, args[1], args[2], args[3], tonumber(args[4]))) do
    local at = redis.call('HGET', p .. 'e', id)
    local colon = string.find(at, ':', 1, true)
    local session = string.sub(at, colon + 1)
    local seq = string.sub(at, 1, colon - 1)
    local fixed = cjson.decode(redis.call('HGET', p .. 'l:' .. session, seq))
    out[#out + 1] = {id, session, string.sub(fixed[8], 1, 1), fixed[9]}
  end
  return out
end

local function count_pending(keys, args)
  return #pending_of(bucket(keys), args[1], args[2], '', 0)
end

-- ARGV: model, then per message: id, vector, stamp. Ids not in this bucket are skipped.
local function set_embeddings(keys, args)
  local p = bucket(keys)
  fence(p)
  local model = args[1]
  local done = 0
  for i = 2, #args, 3 do
    local at = redis.call('HGET', p .. 'e', args[i])
    if at then
      local colon = string.find(at, ':', 1, true)
      local seq, session = string.sub(at, 1, colon - 1), string.sub(at, colon + 1)
      local lkey = p .. 'l:' .. session
      local fixed = cjson.decode(redis.call('HGET', lkey, seq))
      if fixed[2] == 'MESSAGE' then
        local letter = string.sub(fixed[8], 1, 1)
        local old_width = redis.call('HSTRLEN', lkey, seq .. 'v') / 4
        local old_model = redis.call('HGET', lkey, seq .. 'm')
        if old_width == 0 then
          old_width = nil
          redis.call('HINCRBY', p .. 'stats', 'v', 1)
        end
        redis.call('HSET', lkey, seq .. 'v', args[i + 1], seq .. 'm', model,
          seq .. 's', args[i + 2])
        redis.call('HSET', p .. 'vs:' .. session, seq, letter)
        vector_written(p, redis.call('HGET', p .. 's:' .. session, 'owner'), session, seq, letter,
          model, args[i + 1], old_width, old_model)
        if redis.call('HEXISTS', p .. 'emb', args[i]) == 1 then
          redis.call('HSET', p .. 'emb', args[i], letter .. model)
        end
        done = done + 1
      end
    end
  end
  return done
end

local function in_scope(p, session, owner, owners)
  if owner == '' then return true end
  local known = owners[session]
  if known == nil then
    known = redis.call('HGET', p .. 's:' .. session, 'owner') or ''
    owners[session] = known
  end
  return known == owner
end

-- ARGV: owner ('' any), session ('' any), role letters, k, tokens: the k best refs in
-- scope (all of those tied with the k-th) with their scores, best first.
local function text_search(keys, args)
  local p = bucket(keys)
  local owner, session, roles, k = args[1], args[2], args[3], tonumber(args[4])
  local command = {'ZINTER', #args - 4}
  for i = 5, #args do command[#command + 1] = p .. 't:' .. args[i] end
  command[#command + 1] = 'AGGREGATE'
  command[#command + 1] = 'SUM'
  command[#command + 1] = 'WITHSCORES'
  local scored = redis.call(unpack(command))
  local out = {}
  local owners = {}
  local floor = nil
  for i = #scored - 1, 1, -2 do
    local ref, score = scored[i], scored[i + 1]
    if floor ~= nil and tonumber(score) < floor then break end
    local colon = string.find(ref, ':', 1, true)
    local ref_session = string.sub(ref, colon + 1)
    if string.find(roles, string.sub(ref, 1, 1), 1, true)
      and (session == '' or ref_session == session)
      and in_scope(p, ref_session, owner, owners) then
      local stored = stored_event(p, ref_session, string.sub(ref, 2, colon - 1))
      out[#out + 1] = {stored, ref_session, score}
      if #out == k then floor = tonumber(score) end
    end
  end
  return out
end

local function scan_of(p, owner, session, roles, model, width)
  local sessions
  if session ~= '' then
    sessions = {session}
  elseif owner ~= '' then
    sessions = redis.call('ZRANGE', p .. 'oca:' .. okey(owner), 0, -1)
  else
    sessions = redis.call('ZRANGE', p .. 'all', 0, -1)
  end
  local out = {}
  for _, id in ipairs(sessions) do
    if session == '' or in_scope(p, id, owner, {}) then
      local lkey = p .. 'l:' .. id
      local seqs = redis.call('HGETALL', p .. 'vs:' .. id)
      for i = 1, #seqs, 2 do
        if string.find(roles, seqs[i + 1], 1, true) then
          local v = redis.call('HMGET', lkey, seqs[i] .. 'v', seqs[i] .. 'm')
          if v[1] and #v[1] == width and (model == '' or v[2] == model) then
            out[#out + 1] = {seqs[i], id, v[1]}
          end
        end
      end
    end
  end
  return out
end

-- ARGV: owner ('' any), session ('' any), role letters, model ('' any), width in bytes:
-- every vector in scope as {seq, session, vector}.
local function vector_scan(keys, args)
  return scan_of(bucket(keys), args[1], args[2], args[3], args[4], tonumber(args[5]))
end

-- ARGV: owner ('' any), role letters, model, width, k, candidates, the query (float32),
-- the set size up to which the scan is cheaper: {'ann', seq, session, similarity, ...}
-- the candidates the model's vector set gives for the scope, best first; or, when the
-- set is small or gives fewer than k (a filter the walk did not satisfy), {'scan',
-- every vector in scope as vector_scan gives}: either way from one snapshot.
local function vector_ann(keys, args)
  local p = bucket(keys)
  local owner, roles, model, width = args[1], args[2], args[3], tonumber(args[4])
  local k, count, below = tonumber(args[5]), tonumber(args[6]), tonumber(args[8])
  local key = vset_key(p, width, model)
  local function scan() return {'scan', scan_of(p, owner, '', roles, model, width * 4)} end
  if roles == '' then return {'scan', {}} end
  if redis.call('VCARD', key) <= below then return scan() end
  local filters = {}
  if owner ~= '' then
    local code = owner_code(p, owner, false)
    if not code then return {'scan', {}} end
    filters[#filters + 1] = '.o == ' .. code
  end
  if #roles < 4 then
    local numbers = {}
    for i = 1, #roles do numbers[#numbers + 1] = ROLE_NUMBERS[string.sub(roles, i, i)] end
    filters[#filters + 1] = '.r in [' .. table.concat(numbers, ',') .. ']'
  end
  local command = {'VSIM', key, 'FP32', args[7], 'WITHSCORES', 'COUNT', count,
    'EF', math.max(count, 200)}
  if #filters > 0 then
    command[#command + 1] = 'FILTER'
    command[#command + 1] = table.concat(filters, ' and ')
    command[#command + 1] = 'FILTER-EF'
    command[#command + 1] = math.max(100 * count, 20000)
  end
  local found = redis.call(unpack(command))
  if #found < 2 * k then return scan() end
  local out = {'ann'}
  for i = 1, #found, 2 do
    local ref = found[i]
    local colon = string.find(ref, ':', 1, true)
    out[#out + 1] = string.sub(ref, 1, colon - 1)
    out[#out + 1] = string.sub(ref, colon + 1)
    out[#out + 1] = found[i + 1]
  end
  return out
end

-- The change feed, for the client's vector cache (`convostore.backends.sql.vector_cache`).
-- A row as the cache reads it: {row id, vector, session, role letter, seq}, or nil when
-- the ref holds no vector of the model ('' any) and width in bytes.
local function feed_row(p, id, ref, model, width)
  local colon = string.find(ref, ':', 1, true)
  local seq, session = string.sub(ref, 1, colon - 1), string.sub(ref, colon + 1)
  local lkey = p .. 'l:' .. session
  local v = redis.call('HMGET', lkey, seq .. 'v', seq .. 'm')
  if not v[1] or #v[1] ~= width or (model ~= '' and v[2] ~= model) then return nil end
  local letter = redis.call('HGET', p .. 'vs:' .. session, seq)
  if not letter then return nil end
  return {id, v[1], session, letter, seq}
end

local function feed_position(keys, args)
  local p = bucket(keys)
  return {tonumber(redis.call('GET', p .. 'vfn') or '0'),
    tonumber(redis.call('GET', p .. 'vfp') or '0')}
end

-- ARGV: the last change known: the changes after it ('r<row id>', 's<session>').
local function feed_changes(keys, args)
  return redis.call('ZRANGE', bucket(keys) .. 'vf', '(' .. args[1], '+inf', 'BYSCORE')
end

-- ARGV: model, width in bytes, after (row id), limit: the first rows of the key after
-- that row id, at most limit, in row id order (none: the end).
local function feed_rows(keys, args)
  local p = bucket(keys)
  local model, width, after, limit = args[1], tonumber(args[2]), args[3], tonumber(args[4])
  local out = {}
  while true do
    local page = redis.call('ZRANGE', p .. 'vrow', '(' .. after, '+inf', 'BYSCORE',
      'LIMIT', 0, limit, 'WITHSCORES')
    for i = 1, #page, 2 do
      local found = feed_row(p, page[i + 1], page[i], model, width)
      if found then out[#out + 1] = found end
      after = page[i + 1]
    end
    if #out > 0 or #page < 2 * limit then return out end
  end
end

-- ARGV: model, width in bytes, how many row ids follow, the row ids, then session ids:
-- the rows of the key among those ids and in those sessions and their parts.
local function feed_rows_of(keys, args)
  local p = bucket(keys)
  local model, width, n = args[1], tonumber(args[2]), tonumber(args[3])
  local out = {}
  for i = 4, 3 + n do
    local refs = redis.call('ZRANGE', p .. 'vrow', args[i], args[i], 'BYSCORE')
    if refs[1] then out[#out + 1] = feed_row(p, args[i], refs[1], model, width) end
  end
  for i = 4 + n, #args do
    local sessions = redis.call('ZRANGE', p .. 'p:' .. args[i], 0, -1)
    sessions[#sessions + 1] = args[i]
    for _, session in ipairs(sessions) do
      local seqs = redis.call('HKEYS', p .. 'vs:' .. session)
      for _, seq in ipairs(seqs) do
        local ref = seq .. ':' .. session
        local id = redis.call('ZSCORE', p .. 'vrow', ref)
        if id then out[#out + 1] = feed_row(p, id, ref, model, width) end
      end
    end
  end
  return out
end

-- ARGV: session ids: {id, owner ('' none), part of ('' none)} of those that exist.
local function feed_sessions(keys, args)
  local p = bucket(keys)
  local out = {}
  for _, id in ipairs(args) do
    local s = redis.call('HMGET', p .. 's:' .. id, 'id', 'owner', 'part_of')
    if s[1] then out[#out + 1] = {id, s[2] or '', s[3] or ''} end
  end
  return out
end

-- ARGV: pairs of session id and seq: those events.
local function read_refs(keys, args)
  local p = bucket(keys)
  local out = {}
  for i = 1, #args, 2 do out[#out + 1] = stored_event(p, args[i], args[i + 1]) end
  return out
end

local function stats(keys, args)
  local p = bucket(keys)
  local v = redis.call('HMGET', p .. 'stats', 's', 'e', 'm', 'v')
  return {redis.call('HLEN', p .. 'users'), tonumber(v[1] or '0'), tonumber(v[2] or '0'),
    tonumber(v[3] or '0'), tonumber(v[4] or '0')}
end

local function put_users(keys, args)
  local p = bucket(keys)
  fence(p)
  for i = 2, #args, 2 do
    if args[1] == 'replace' then
      redis.call('HSET', p .. 'users', args[i], args[i + 1])
    else
      redis.call('HSETNX', p .. 'users', args[i], args[i + 1])
    end
  end
  return 1
end

-- The directory: KEYS[1] is a session id's entry, written once with its bucket.
-- ARGV: the bucket: 'ok', or the bucket it names already.
local function claim(keys, args)
  local found = redis.call('SET', keys[1], args[1], 'NX', 'GET')
  if not found or found == args[1] then return 'ok' end
  return found
end

-- ARGV: the bucket the entry names (whose session is gone), the new bucket.
local function reclaim(keys, args)
  if redis.call('GET', keys[1]) ~= args[1] then return 0 end
  redis.call('SET', keys[1], args[2])
  return 1
end

-- The load runs with few globals: the tables are walked by index.
local writes = {
  {'claim', claim}, {'reclaim', reclaim}, {'insert_session', insert_session},
  {'update_session', update_session}, {'set_title', set_title},
  {'delete_session', delete_session}, {'delete_expired', delete_expired},
  {'add_keys', add_keys}, {'remove_key', remove_key}, {'append', append},
  {'set_narration', set_narration}, {'set_embeddings', set_embeddings},
  {'put_users', put_users},
}
local reads = {
  {'get_session', get_session}, {'list_sessions', list_sessions},
  {'count_sessions', count_sessions}, {'find_part', find_part},
  {'list_parts', list_parts}, {'participants', participants},
  {'by_metadata', by_metadata}, {'read_range', read_range}, {'read_ids', read_ids},
  {'version', version}, {'pending', pending}, {'count_pending', count_pending},
  {'text_search', text_search}, {'vector_scan', vector_scan},
  {'vector_ann', vector_ann}, {'feed_position', feed_position},
  {'feed_changes', feed_changes}, {'feed_rows', feed_rows}, {'feed_rows_of', feed_rows_of},
  {'feed_sessions', feed_sessions},
  {'read_refs', read_refs}, {'stats', stats},
}
-- A bucket whose slot is being moved is frozen: its writes are refused, before any
-- write, with TRYAGAIN (which a client retries), until the move is done.
local function guarded(callback)
  return function(keys, args)
    if redis.call('EXISTS', bucket(keys) .. 'frozen') == 1 then
      return redis.error_reply('TRYAGAIN this owner bucket is being moved')
    end
    return callback(keys, args)
  end
end

local function freeze(keys, args)
  redis.call('SET', bucket(keys) .. 'frozen', '1')
  return 1
end

local function thaw(keys, args)
  return redis.call('DEL', bucket(keys) .. 'frozen')
end

for i = 1, #writes do
  local callback = writes[i][2]
  if i > 2 then callback = guarded(callback) end
  redis.register_function{function_name = 'PREFIX' .. writes[i][1], callback = callback}
end
redis.register_function{function_name = 'PREFIX' .. 'freeze', callback = freeze}
redis.register_function{function_name = 'PREFIX' .. 'thaw', callback = thaw}
for i = 1, #reads do
  redis.register_function{function_name = 'PREFIX' .. reads[i][1],
    callback = reads[i][2], flags = {'no-writes'}}
end
""".replace("LIBRARY_NAME", LIBRARY_NAME).replace("PREFIX", function(""))


def library(*, vector_sets: bool) -> str:
    """The library's code for a server with Redis 8's vector sets (its functions keep
    them), or without (they write the change feed the client's vector cache reads)."""
    return _LIBRARY.replace("VECTOR_SETS_FLAG", "true" if vector_sets else "false")
