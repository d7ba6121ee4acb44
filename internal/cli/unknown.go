package cli

import (
	"slices"
	"strings"
)

// knownPrefixes returns the prefixes of the relay's variables, each sink's
// among them: a variable with one of them that the relay does not know is
// most likely a typo.
func knownPrefixes() []string {
	prefixes := []string{"RELAY_"}
	for _, k := range sinkKinds {
		prefixes = append(prefixes, k.prefix)
	}
	return append(prefixes, "LOG_", "DATABASE_")
}

// unknownVariable is a variable of environ with one of the relay's prefixes
// that the relay does not read, and the known name closest to it.
type unknownVariable struct{ Name, Closest string }

// unknownVariables lists environ's unknown variables, in order.
func unknownVariables(environ []string) []unknownVariable {
	var known []string
	for _, v := range envReference() {
		known = append(known, v.Name)
	}
	prefixes := knownPrefixes()
	var out []unknownVariable
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(known, name) || !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		closest, best := "", -1
		for _, k := range known {
			if d := editDistance(name, k); best < 0 || d < best {
				closest, best = k, d
			}
		}
		out = append(out, unknownVariable{Name: name, Closest: closest})
	}
	return out
}

// suggestCommand returns the command whose name is closest to name, an
// unknown command, when it is close enough to be a typo (stauts, statsu,
// stat for status); "" when none is.
func suggestCommand(name string) string {
	closest, best := "", -1
	for _, c := range commands {
		if d := editDistance(name, c.name); best < 0 || d < best {
			closest, best = c.name, d
		}
	}
	if best < 0 || best > max(2, len(name)/3) || best >= len(name) {
		return ""
	}
	return closest
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
