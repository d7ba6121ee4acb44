package cli

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// tenantsFile is RELAY_TENANTS_FILE's content:
//
//	tenants:
//	  - name: acme
//	    database_url: ${ACME_DATABASE_URL}
//	    schemas: [outbox]
//	  - name: globex
//	    database_url_file: /run/secrets/globex-database-url
//	    schema_match: tenant\_%
//	    schema_owners: [globex_owner]
//	    mode: ordered
//
// ${VAR} in any value is VAR from the environment (an unset or empty VAR is
// an error, not an empty string); $$ is a dollar sign.
type tenantsFile struct {
	Tenants []tenantEntry `yaml:"tenants"`
}

// tenantEntry is one tenant of the file.
type tenantEntry struct {
	Name            string   `yaml:"name"`
	DatabaseURL     string   `yaml:"database_url"`
	DatabaseURLFile string   `yaml:"database_url_file"`
	Schemas         []string `yaml:"schemas"`
	SchemaMatch     string   `yaml:"schema_match"`
	SchemaOwners    []string `yaml:"schema_owners"`
	Mode            string   `yaml:"mode"`
}

// tenantName is what a tenant may be called: it is a metric label value
// and a command-line flag's value.
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// readTenantsFile reads, expands and checks RELAY_TENANTS_FILE. Its errors
// name the variable, the file, the tenant and the key, and never show a
// database URL.
func readTenantsFile(path string, environ []string) ([]tenant, error) {
	refuse := func(reason string) error {
		return &configError{Var: "RELAY_TENANTS_FILE", Value: path, Reason: reason,
			Allowed: "a YAML file of at most " + formatLimit(tenantsFileLimit) + " of tenants: [{name, database_url or database_url_file, schemas and/or schema_match, schema_owners, mode}] (docs/many-outboxes.md)"}
	}
	b, err := readFileLimited(path, tenantsFileLimit)
	if err != nil {
		return nil, refuse("cannot read it: " + err.Error())
	}
	var f tenantsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, refuse(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(f.Tenants) == 0 {
		return nil, refuse("no tenants in it")
	}
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var out []tenant
	for i, e := range f.Tenants {
		t, err := e.tenant(vars)
		if err != nil {
			who := fmt.Sprintf("tenant %d", i+1)
			if tenantName.MatchString(e.Name) {
				who = fmt.Sprintf("tenant %q", e.Name)
			}
			return nil, refuse(who + ": " + err.Error())
		}
		if slices.ContainsFunc(out, func(o tenant) bool { return o.Name == t.Name }) {
			return nil, refuse(fmt.Sprintf("tenant %q is listed twice", t.Name))
		}
		for _, o := range out {
			if o.DatabaseURL != t.DatabaseURL {
				continue
			}
			for _, s := range t.Schemas {
				if slices.Contains(o.Schemas, s) {
					return nil, refuse(fmt.Sprintf("tenants %q and %q both list schema %s of the same database", o.Name, t.Name, s))
				}
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// tenant expands and checks one entry.
func (e tenantEntry) tenant(vars map[string]string) (tenant, error) {
	name, err := expandVars(e.Name, vars)
	if err != nil {
		return tenant{}, fmt.Errorf("name: %w", err)
	}
	if !tenantName.MatchString(name) {
		return tenant{}, fmt.Errorf("name %q: want lower-case letters, digits, '_', '.' or '-', starting with a letter or digit, at most 63 characters", name)
	}
	t := tenant{Name: name}
	switch {
	case e.DatabaseURL != "" && e.DatabaseURLFile != "":
		return tenant{}, errors.New("database_url and database_url_file are both set: set one of them")
	case e.DatabaseURL != "":
		if t.DatabaseURL, err = expandVars(e.DatabaseURL, vars); err != nil {
			return tenant{}, fmt.Errorf("database_url: %w", err)
		}
	case e.DatabaseURLFile != "":
		p, err := expandVars(e.DatabaseURLFile, vars)
		if err != nil {
			return tenant{}, fmt.Errorf("database_url_file: %w", err)
		}
		b, err := readFileLimited(p, secretFileLimit)
		if err != nil {
			return tenant{}, fmt.Errorf("database_url_file %s: cannot read it: %w", p, err)
		}
		t.DatabaseURL = strings.TrimRight(string(b), "\r\n")
	default:
		return tenant{}, errors.New("no database_url or database_url_file")
	}
	if t.DatabaseURL == "" {
		return tenant{}, errors.New("the database URL is empty")
	}
	if err := checkDatabaseScheme(t.DatabaseURL); err != nil {
		return tenant{}, fmt.Errorf("database URL: %w", err)
	}
	if _, err := pgxpool.ParseConfig(t.DatabaseURL); err != nil {
		return tenant{}, errors.New("the database URL is not a PostgreSQL connection string pgx can parse (not shown: it may hold a password)")
	}
	for _, s := range e.Schemas {
		if s, err = expandVars(s, vars); err != nil {
			return tenant{}, fmt.Errorf("schemas: %w", err)
		}
		if outbox.ValidateSchema(s) != nil {
			return tenant{}, fmt.Errorf("schemas: %q is not a valid schema name (a lower-case identifier)", s)
		}
		if slices.Contains(t.Schemas, s) {
			return tenant{}, fmt.Errorf("schemas: %q is listed twice", s)
		}
		t.Schemas = append(t.Schemas, s)
	}
	if e.SchemaMatch != "" {
		if t.SchemaMatch, err = expandVars(e.SchemaMatch, vars); err != nil {
			return tenant{}, fmt.Errorf("schema_match: %w", err)
		}
		if err := validateSchemaMatch(t.SchemaMatch); err != nil {
			return tenant{}, fmt.Errorf("schema_match: %w", err)
		}
	}
	for _, o := range e.SchemaOwners {
		if o, err = expandVars(o, vars); err != nil {
			return tenant{}, fmt.Errorf("schema_owners: %w", err)
		}
		if err := validateRoleName(o); err != nil {
			return tenant{}, fmt.Errorf("schema_owners: %w", err)
		}
		t.SchemaOwners = append(t.SchemaOwners, o)
	}
	if len(t.SchemaOwners) > 0 && t.SchemaMatch == "" {
		return tenant{}, errors.New("schema_owners without schema_match: it says who may own the schemas the pattern finds")
	}
	if len(t.Schemas) == 0 && t.SchemaMatch == "" {
		return tenant{}, errors.New("no schemas or schema_match")
	}
	if e.Mode != "" {
		if !slices.Contains(outbox.Modes, outbox.Mode(e.Mode)) {
			return tenant{}, fmt.Errorf("mode %q: want unordered, ordered or partitioned", e.Mode)
		}
		t.Mode = outbox.Mode(e.Mode)
	}
	return t, nil
}

// varRef is ${NAME} in a tenants file's value.
var varRef = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandVars replaces ${NAME} by NAME's value in vars and $$ by $. An unset
// or empty NAME, and a $ that starts neither, are errors naming it.
func expandVars(s string, vars map[string]string) (string, error) {
	var problem error
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		v := vars[name]
		if v == "" && problem == nil {
			problem = fmt.Errorf("${%s} is not set in the environment", name)
		}
		return v
	})
	if problem != nil {
		return "", problem
	}
	if strings.Contains(varRef.ReplaceAllString(s, ""), "$") {
		return "", errors.New("a $ that is neither ${NAME} nor $$")
	}
	return out, nil
}
