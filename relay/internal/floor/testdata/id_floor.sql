(SELECT least(min(w.id), @id_floor::bigint)
                    FROM unnest(@passed_writers::text[]::xid8[], @passed_ids::bigint[]) AS w(x, id)
                   WHERE pg_visible_in_snapshot(w.x, pg_current_snapshot()))
