-- Data prepared once per fleet (docs/architecture.md#data-flow): one row per data key (the
-- tokenizer's cache key and the texts it encodes, hashed by the worker). A row is either a claim
-- ('preparing': one worker prepares until claim_expires_at, renewing it while it works) or
-- 'ready' with its files in prepared_files. Only the SHA-256 of the claim token is kept, as for
-- lease tokens. An expired claim is taken over by the next worker that asks.
CREATE TABLE IF NOT EXISTS prepared_data (
  key                 TEXT PRIMARY KEY CHECK (key ~ '^[0-9a-f]{64}$'),
  state               TEXT NOT NULL CHECK (state IN ('preparing', 'ready')),
  description         TEXT NOT NULL DEFAULT '',
  worker_id           BIGINT REFERENCES workers(id) ON DELETE SET NULL,
  claim_token_sha256  TEXT NOT NULL DEFAULT '',
  claim_expires_at    TIMESTAMPTZ,
  claims              INT NOT NULL DEFAULT 1,
  created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
  ready_at            TIMESTAMPTZ
);

-- The files of a ready key, stored in the server's content-addressed store (--store-dir) by
-- SHA-256. GetPreparedFile serves only hashes listed here under a ready key.
CREATE TABLE IF NOT EXISTS prepared_files (
  key         TEXT NOT NULL REFERENCES prepared_data(key) ON DELETE CASCADE,
  role        TEXT NOT NULL,
  sha256      TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes  BIGINT NOT NULL CHECK (size_bytes >= 0),
  PRIMARY KEY (key, role)
);
CREATE INDEX IF NOT EXISTS prepared_files_sha256 ON prepared_files (sha256);
