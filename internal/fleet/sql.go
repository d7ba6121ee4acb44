package fleet

// discoverSQL lists the schemas whose name matches the LIKE pattern @match
// and that hold a migrated outbox (a schema_version and a messages table),
// with the owner of each and of its messages table, and whether both are
// among the trusted owners: @owners, or when it is null the role the
// relay connects as and the owners of the schemas @listed (those the
// configuration names for the same database). It reads the catalogs only,
// which every role may, so that an outbox whose grants were revoked is
// still found (and its relay says why it cannot work). The last column is
// the trusted owners, for the warning about a schema that is not served.
const discoverSQL = `
WITH trusted AS (
    SELECT coalesce(@owners::text[], ARRAY(
               SELECT current_user::text
                UNION
               SELECT pg_catalog.pg_get_userbyid(l.nspowner)::text
                 FROM pg_catalog.pg_namespace l
                WHERE l.nspname = ANY (@listed::text[])
                ORDER BY 1)) AS owners
)
SELECT n.nspname::text,
       pg_catalog.pg_get_userbyid(n.nspowner)::text,
       pg_catalog.pg_get_userbyid(m.relowner)::text,
       pg_catalog.pg_get_userbyid(n.nspowner)::text = ANY (t.owners)
           AND pg_catalog.pg_get_userbyid(m.relowner)::text = ANY (t.owners),
       t.owners
  FROM pg_catalog.pg_namespace n
  JOIN pg_catalog.pg_class m ON m.relnamespace = n.oid AND m.relname = 'messages' AND m.relkind IN ('r', 'p')
 CROSS JOIN trusted t
 WHERE n.nspname LIKE @match
   AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_version')
 ORDER BY 1`
