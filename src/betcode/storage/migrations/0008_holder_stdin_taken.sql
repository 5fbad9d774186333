-- A line its holder confirmed (TOOK) keeps its key, without its bytes, until the holder ends:
-- a re-attaching daemon then tells the answers claude was given from those it never journaled
-- (an answer is logged before it is journaled), and sends again only the latter.
ALTER TABLE holder_stdin ADD COLUMN taken INTEGER NOT NULL DEFAULT 0;
