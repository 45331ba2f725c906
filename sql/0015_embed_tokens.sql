-- Library embed pages are addressed by a random token, not the sequential video id, so one
-- user's pages cannot be found by counting (README "Real providers", Results). 32 random bytes
-- from two v4 UUIDs (244 random bits; gen_random_uuid is core since PostgreSQL 13), base64url.
ALTER TABLE videos ADD COLUMN embed_token text;

UPDATE videos
   SET embed_token = translate(encode(decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64'), '+/=', '-_');

-- Existing embed_url values named the video id: they now name the token (the old address is 404).
UPDATE videos
   SET embed_url = regexp_replace(embed_url, '/embed/[0-9]+$', '/embed/' || embed_token)
 WHERE embed_url IS NOT NULL;

CREATE UNIQUE INDEX videos_embed_token ON videos (embed_token);
