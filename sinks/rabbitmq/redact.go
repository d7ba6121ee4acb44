package rabbitmq

import "net/url"

// Redact returns an AMQP URL for logs: the password removed, the user name
// kept.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}
