package fleet

// discoverSQL lists the schemas whose name matches the LIKE pattern @match
// and that hold a migrated outbox: a schema_version and a messages table.
// It reads the catalogs only, which every role may, so that an outbox
// whose grants were revoked is still found (and its relay says why it
// cannot work).
const discoverSQL = `
SELECT n.nspname::text
  FROM pg_catalog.pg_namespace n
 WHERE n.nspname LIKE @match
   AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_version')
   AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'messages' AND c.relkind IN ('r', 'p'))
 ORDER BY 1`
