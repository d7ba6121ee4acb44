package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// signature returns the webhook-signature header value: "v1,<base64
// HMAC-SHA256 of id.timestamp.body>" for each secret, separated by spaces.
func signature(secrets []Secret, id string, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	var b strings.Builder
	for i, s := range secrets {
		mac := hmac.New(sha256.New, s.key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}
