SELECT (SELECT count(*) FROM (
           SELECT 1 FROM "outbox".messages_all
            WHERE last_error IS NOT NULL AND available_at > now()
              AND key IS NOT NULL AND NOT waiting AND attempts > 0 AND leased_by IS NULL
            LIMIT @heads_cap) AS h),
       (SELECT count(*) FROM (SELECT 1 FROM "outbox".messages_all WHERE waiting LIMIT @cap) AS w)
