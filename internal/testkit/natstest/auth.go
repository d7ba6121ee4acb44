package natstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// NKeyUser makes a user NKey. It returns the public key, for the server
// (server.Options.Nkeys), and a file in t's temporary directory holding the
// seed, for the client.
func NKeyUser(t testing.TB) (public, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return public, seedFile
}

// Operator is decentralized JWT authentication as nsc sets it up: an
// operator, its system account, and one account with JetStream, whose users
// connect with creds files (a user JWT signed by the account, and the user's
// NKey seed).
type Operator struct {
	claims   *jwt.OperatorClaims
	system   string // the system account's public key
	account  nkeys.KeyPair
	accounts map[string]string // public key → account JWT
}

// NewOperator makes an operator with a system account and an account.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	op, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, err := op.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	o := &Operator{claims: jwt.NewOperatorClaims(opPub), accounts: map[string]string{}}

	_, sysPub := newAccount(t)
	o.system = sysPub
	o.claims.SystemAccount = sysPub
	o.accounts[sysPub] = encode(t, jwt.NewAccountClaims(sysPub), op)

	acc, accPub := newAccount(t)
	o.account = acc
	ac := jwt.NewAccountClaims(accPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	o.accounts[accPub] = encode(t, ac, op)
	return o
}

// Configure makes a server trust the operator and resolve its accounts
// from memory: pass it to Start.
func (o *Operator) Configure(opts *server.Options) {
	opts.TrustedOperators = []*jwt.OperatorClaims{o.claims}
	opts.SystemAccount = o.system
	resolver := &server.MemAccResolver{}
	for pub, token := range o.accounts {
		if err := resolver.Store(pub, token); err != nil {
			panic("store an account JWT in memory: " + err.Error())
		}
	}
	opts.AccountResolver = resolver
}

// Creds makes a user of the account and returns its creds file, in t's
// temporary directory.
func (o *Operator) Creds(t testing.TB) string {
	t.Helper()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(encode(t, jwt.NewUserClaims(pub), o.account), seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newAccount(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, pub
}

func encode(t testing.TB, claims jwt.Claims, signer nkeys.KeyPair) string {
	t.Helper()
	token, err := claims.Encode(signer)
	if err != nil {
		t.Fatalf("sign a JWT: %v", err)
	}
	return token
}
