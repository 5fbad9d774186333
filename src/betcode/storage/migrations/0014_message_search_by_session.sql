-- The message search index also holds each message's session (its id without dashes, one
-- token), so a search within one session intersects two lists of the index instead of walking
-- every match of the words and dropping the other sessions' (a common word in one old session
-- took ~200 ms over 100,000 messages). The index is rebuilt from `messages`.
DROP TRIGGER message_search_insert;
DROP TRIGGER message_search_delete;
DROP TABLE message_search;

CREATE VIRTUAL TABLE message_search USING fts5(body, session, tokenize = 'unicode61');

CREATE TRIGGER message_search_insert AFTER INSERT ON messages
WHEN NEW.message_type IN ('user', 'assistant') AND json_valid(NEW.payload)
BEGIN
    INSERT INTO message_search (rowid, body, session)
    SELECT NEW.id, body, replace(NEW.session_id, '-', '') FROM (
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

INSERT INTO message_search (rowid, body, session)
SELECT id, body, session FROM (
    SELECT messages.id AS id, replace(messages.session_id, '-', '') AS session,
        CASE json_type(messages.payload, '$.message.content')
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
