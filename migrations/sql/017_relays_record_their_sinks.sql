-- Relays record the sinks they deliver to (issue 38): a relay whose
-- default sink (RELAY_SINK) differs from that of a live relay of the same
-- schema refuses to start, since the rows without a destination would go
-- to one broker or the other depending on which relay claimed them. Null
-- for relays of earlier versions, which are not compared.
ALTER TABLE {{.schema}}.relays ADD COLUMN default_sink text, ADD COLUMN sinks text[];
