package outbox

import (
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateSchema reports whether name can be the relay's schema
// (RELAY_SCHEMA): a lower-case SQL identifier of at most 63 characters
// (letters, digits and underscores, not starting with a digit).
func ValidateSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return fmt.Errorf("schema name %q must be a lower-case identifier: a letter or underscore, then letters, digits or underscores, at most 63 characters", name)
	}
	return nil
}

// QuoteSchema returns the schema name quoted for use in SQL. It panics when
// the name is invalid: callers validate user input with ValidateSchema
// first.
func QuoteSchema(name string) string {
	if err := ValidateSchema(name); err != nil {
		panic(err)
	}
	return pgx.Identifier{name}.Sanitize()
}
