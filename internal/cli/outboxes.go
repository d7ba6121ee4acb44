package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/outbox-relay/outbox-relay/internal/fleet"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// tenant is one database and the outboxes a relay serves in it: the
// environment's (DATABASE_URL with RELAY_SCHEMA, RELAY_SCHEMAS or
// RELAY_SCHEMA_MATCH), or one entry of RELAY_TENANTS_FILE (tenantsfile.go).
type tenant struct {
	// Name is the tenant's name in the file, its metrics' tenant label and
	// the admin commands' --tenant; empty in the environment's form.
	Name        string
	DatabaseURL string
	// Schemas are served as listed; SchemaMatch, when set, is a LIKE
	// pattern whose matching schemas that hold a migrated outbox are served
	// too, found again every RELAY_DISCOVER_INTERVAL.
	Schemas     []string
	SchemaMatch string
	// SchemaOwners are the roles trusted to own the schemas SchemaMatch
	// finds (RELAY_SCHEMA_OWNERS, or the tenant's schema_owners); empty for
	// the default (fleet.Trust).
	SchemaOwners []string
	// Mode is the tenant's own mode, or empty for RELAY_MODE.
	Mode outbox.Mode
}

// several reports whether the configuration asks for more than one outbox,
// or for outboxes found at run time: then the relay's metrics carry a
// schema label (and a tenant label from the file), RELAY_IDLE_POLL_INTERVAL
// defaults to idlePollSeveral, and a failing outbox is retried on its own
// instead of stopping the relay.
func (c *config) several() bool {
	return c.TenantsFile != "" || c.SchemaMatch != "" || len(c.schemaList()) > 1
}

// idlePollSeveral is RELAY_IDLE_POLL_INTERVAL's default for a relay that
// serves several outboxes.
const idlePollSeveral = time.Second

// idlePollInterval is RELAY_IDLE_POLL_INTERVAL or its default.
func (c *config) idlePollInterval() time.Duration {
	switch {
	case c.IdlePollInterval != 0:
		return c.IdlePollInterval
	case c.several():
		return max(idlePollSeveral, c.PollInterval)
	default:
		return c.PollInterval
	}
}

// schemaList is RELAY_SCHEMAS split, without blanks.
func (c *config) schemaList() []string {
	var out []string
	for s := range strings.SplitSeq(c.Schemas, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// schemaOwnerList is RELAY_SCHEMA_OWNERS split, without blanks.
func (c *config) schemaOwnerList() []string {
	var out []string
	for s := range strings.SplitSeq(c.SchemaOwners, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// validateOutboxes checks the variables that say which outboxes are
// served: RELAY_SCHEMA or RELAY_SCHEMAS (not both set), RELAY_SCHEMA_MATCH
// and RELAY_SCHEMA_OWNERS, and RELAY_TENANTS_FILE, which replaces them all
// and DATABASE_URL.
// schemaSet says whether RELAY_SCHEMA was set rather than defaulted.
func (c *config) validateOutboxes(schemaSet bool) error {
	if c.TenantsFile != "" {
		for _, name := range []string{"DATABASE_URL", "RELAY_SCHEMAS", "RELAY_SCHEMA_MATCH", "RELAY_SCHEMA_OWNERS"} {
			if fmt.Sprint(configField(name).value(c).Interface()) != "" {
				return &configError{Var: "RELAY_TENANTS_FILE", Value: c.TenantsFile, Reason: "set together with " + name,
					Allowed: "a file that lists every database and schema, with " + name + " unset (or " + name + " without the file)"}
			}
		}
		if schemaSet {
			return &configError{Var: "RELAY_TENANTS_FILE", Value: c.TenantsFile, Reason: "set together with RELAY_SCHEMA",
				Allowed: "a file that lists every database and schema, with RELAY_SCHEMA unset"}
		}
	}
	list := c.schemaList()
	if c.Schemas != "" {
		if schemaSet {
			return c.refuse("RELAY_SCHEMAS", "set together with RELAY_SCHEMA: set one of them")
		}
		if len(list) == 0 {
			return c.refuse("RELAY_SCHEMAS", "no schema in it")
		}
	}
	for i, s := range list {
		if err := outbox.ValidateSchema(s); err != nil {
			return c.refuse("RELAY_SCHEMAS", fmt.Sprintf("%q is not a valid schema name", s))
		}
		if slices.Contains(list[:i], s) {
			return c.refuse("RELAY_SCHEMAS", fmt.Sprintf("%q is listed twice", s))
		}
	}
	if c.SchemaMatch != "" {
		if err := validateSchemaMatch(c.SchemaMatch); err != nil {
			return c.refuse("RELAY_SCHEMA_MATCH", err.Error())
		}
		if schemaSet {
			return c.refuse("RELAY_SCHEMA_MATCH", "set together with RELAY_SCHEMA: use RELAY_SCHEMAS to serve listed schemas beside the matching ones")
		}
	}
	if c.SchemaOwners != "" {
		if c.SchemaMatch == "" {
			return c.refuse("RELAY_SCHEMA_OWNERS", "set without RELAY_SCHEMA_MATCH: it says who may own the schemas the pattern finds")
		}
		owners := c.schemaOwnerList()
		if len(owners) == 0 {
			return c.refuse("RELAY_SCHEMA_OWNERS", "no role in it")
		}
		for _, o := range owners {
			if err := validateRoleName(o); err != nil {
				return c.refuse("RELAY_SCHEMA_OWNERS", err.Error())
			}
		}
	}
	switch {
	case c.DiscoverInterval < time.Second || c.DiscoverInterval > 30*time.Second:
		return c.refuse("RELAY_DISCOVER_INTERVAL", "out of range")
	case c.IdlePollInterval != 0 && (c.IdlePollInterval < c.PollInterval || c.IdlePollInterval > time.Minute):
		return c.refuse("RELAY_IDLE_POLL_INTERVAL", "out of range")
	case c.ReadyWhen != "all" && c.ReadyWhen != "any":
		return c.refuse("RELAY_READY_WHEN", "")
	}
	return nil
}

// validateSchemaMatch checks a LIKE pattern for schemas: not empty, no
// more than 63 bytes, not one that matches every name (only % and _), and
// no dangling escape.
func validateSchemaMatch(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty")
	case strings.Trim(p, "%_") == "":
		return errors.New("matches every schema: it would serve any schema that holds an outbox, another relay's too; " +
			"name what the schemas to serve have in common, like tenant\\_%")
	case len(p) > 63:
		return fmt.Errorf("longer than a schema name (63 bytes)")
	case strings.HasSuffix(p, `\`) && !strings.HasSuffix(p, `\\`):
		return fmt.Errorf("ends with a lone escape (\\)")
	}
	return nil
}

// validateRoleName checks a role name of RELAY_SCHEMA_OWNERS or of a
// tenant's schema_owners: at most 63 bytes (longer names are cut by
// PostgreSQL), not empty, no comma (the list's separator) and no control character.
func validateRoleName(name string) error {
	switch {
	case name == "":
		return errors.New("an empty role name")
	case len(name) > 63:
		return fmt.Errorf("%q is longer than a role name (63 bytes)", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r == ',' || unicode.IsControl(r) }):
		return fmt.Errorf("%q is not a role name: it holds a comma or a control character", name)
	}
	return nil
}

// tenants returns the databases and outboxes the configuration serves:
// RELAY_TENANTS_FILE's tenants, or the environment's one database. environ
// gives the file its ${VAR}s.
func (c *config) tenants(environ []string) ([]tenant, error) {
	if c.TenantsFile != "" {
		return readTenantsFile(c.TenantsFile, environ)
	}
	t := tenant{DatabaseURL: c.DatabaseURL, SchemaMatch: c.SchemaMatch, Schemas: c.schemaList(), SchemaOwners: c.schemaOwnerList()}
	if len(t.Schemas) == 0 && t.SchemaMatch == "" {
		t.Schemas = []string{c.Schema}
	}
	return []tenant{t}, nil
}

// databases returns tenants as the fleet takes them.
func (c *config) databases(environ []string) ([]fleet.Database, error) {
	ts, err := c.tenants(environ)
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Database, 0, len(ts))
	for _, t := range ts {
		out = append(out, fleet.Database{Tenant: t.Name, URL: t.DatabaseURL, Schemas: t.Schemas, Match: t.SchemaMatch, Owners: t.SchemaOwners, Mode: t.Mode})
	}
	return out, nil
}

// describeOutboxes says which outboxes a relay serves, for its first log
// line: schema names, "matching" before patterns, tenant: before each
// tenant's.
func describeOutboxes(dbs []fleet.Database) string {
	var parts []string
	for _, d := range dbs {
		what := slices.Clone(d.Schemas)
		if d.Match != "" {
			what = append(what, "matching "+d.Match)
		}
		part := strings.Join(what, ",")
		if d.Tenant != "" {
			part = d.Tenant + ":" + part
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}
