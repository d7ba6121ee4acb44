// Package keychain lets a relay send a key's next rows while the key's
// previous row is still in flight in the same relay, without ever sending
// a row of a key before the key's older rows were delivered (or
// dead-lettered).
//
// # Why
//
// Per-key order used to hold because a claim took a key's rows only when no
// older row of the key lay outside the claim: in flight, backing off, not
// yet due. A relay draining a key's rows therefore claimed them one batch at
// a time, and a claim that met a key whose previous row was still in flight
// here locked the key's next rows and dropped them again: in a 200k burst of
// keyed rows over four relays, half of every claim.
//
// # The protocol
//
// A claim of a keyed mode counts a row of the key as outside only when it is
// not leased by this relay under a lease still running: the rows this
// relay holds of the key are skipped, and the key's rows after them are
// kept, oldest first. For each key whose rows it kept behind such a row, the
// claim reports the id of the row just before its first kept row (After):
// that row is necessarily one this relay leased (any other would have held
// the key's rows back). Ordered mode's claim, which takes a key's rows
// only as its head and its run otherwise, continues a key only when the
// key's oldest row and the row just before the candidate are both this
// relay's under a running lease, and the key is one this relay's chains
// hold (Keys); After is then that row just before.
//
// Every keyed row a relay claims gets a Link (Chains.Claimed): resolved
// once its outcome is known, passed when it was delivered, a duplicate, or
// dead-lettered (which ends its hold on the key), stopped otherwise
// (retried, released, not sent). Each link follows the one before it in its
// key: the previous row of the same claim, or the link of After. A row is
// sent only once the link it follows has passed; when that link stopped,
// the row is released unsent, and its own link stops, so that the whole
// rest of the key stops behind a failure. A link's own outcome counts only
// once the link it follows has resolved (a row dead-lettered without being
// sent, before its predecessor's outcome, does not let its successor
// overtake the predecessor).
//
// # What the relay may not know
//
// The claim skips the rows leased under this relay's id, which the relay
// itself may not hold: a previous process with the same id whose leases
// still run, or a row whose settle failed. After names such a row; its link
// is then unknown to Chains, which waits Config.Registration for it (a
// concurrent claim of the same relay registers its rows just after its
// commit) and then stops it: the rows behind it are released, and claimed
// again once that lease is over. A link therefore never passes unless this
// relay saw its row delivered.
//
// Links are forgotten once their rows are settled and no claim that began
// before the settle is still running (such a claim may have seen the row
// still leased, and name it in After), or when their lease is over.
//
// # Keys
//
// Keys lists the keys of the rows the relay holds: registered and not
// settled (past their lease too, until the next Begin drops them). A claim may take them as a hint that a key
// has a row in flight here (partitioned mode's claim skips a lookup for
// them; ordered mode's continues only them); nothing of a key's order rests on the list, which a settle or a
// lease's end may make stale the moment it is read.
package keychain
