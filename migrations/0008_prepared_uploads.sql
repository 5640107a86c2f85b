-- What each data-preparation claim uploaded (PutPreparedFile), so that a claim publishes only
-- files it uploaded itself: the content-addressed store also holds checkpoints, which only their
-- run's lease may read, and a published file is served to every worker token. Keyed by the
-- claim's token digest: after an expired claim is taken over, the new claim starts with nothing.
-- Dropped with the claim (abandon) and when the key is published.
CREATE TABLE IF NOT EXISTS prepared_uploads (
  key                 TEXT NOT NULL REFERENCES prepared_data(key) ON DELETE CASCADE,
  claim_token_sha256  TEXT NOT NULL,
  sha256              TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes          BIGINT NOT NULL CHECK (size_bytes >= 0),
  uploaded_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (key, claim_token_sha256, sha256)
);
