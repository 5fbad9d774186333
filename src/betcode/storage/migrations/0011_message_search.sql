-- Full-text search over what was said in every session (`betcode sessions search`): the text
-- of each stored user and assistant message, indexed as the line is stored. Triggers keep the
-- index in step with `messages` inside the writer's own transactions, so a line, its index row
-- and their removal (session delete, compaction) always commit together. A payload that is
-- not JSON, or has no text, adds nothing (and never fails the write of the line itself).
CREATE VIRTUAL TABLE message_search USING fts5(body, tokenize = 'unicode61');

CREATE TRIGGER message_search_insert AFTER INSERT ON messages
WHEN NEW.message_type IN ('user', 'assistant') AND json_valid(NEW.payload)
BEGIN
    INSERT INTO message_search (rowid, body)
    SELECT NEW.id, body FROM (
        SELECT CASE json_type(NEW.payload, '$.message.content')
            WHEN 'text' THEN json_extract(NEW.payload, '$.message.content')
            WHEN 'array' THEN (
                SELECT group_concat(json_extract(block.value, '$.text'), char(10))
                FROM json_each(NEW.payload, '$.message.content') AS block
                WHERE json_extract(block.value, '$.type') = 'text'
            )
        END AS body
    )
    WHERE body IS NOT NULL AND body <> '';
END;

CREATE TRIGGER message_search_delete AFTER DELETE ON messages
BEGIN
    DELETE FROM message_search WHERE rowid = OLD.id;
END;

INSERT INTO message_search (rowid, body)
SELECT id, body FROM (
    SELECT messages.id AS id, CASE json_type(messages.payload, '$.message.content')
        WHEN 'text' THEN json_extract(messages.payload, '$.message.content')
        WHEN 'array' THEN (
            SELECT group_concat(json_extract(block.value, '$.text'), char(10))
            FROM json_each(messages.payload, '$.message.content') AS block
            WHERE json_extract(block.value, '$.type') = 'text'
        )
    END AS body
    FROM messages
    WHERE messages.message_type IN ('user', 'assistant') AND json_valid(messages.payload)
)
WHERE body IS NOT NULL AND body <> '';
