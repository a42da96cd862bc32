package wiretest

import (
	"reflect"
	"testing"

	"github.com/haltline/haltline/wire"
)

// SameAsReference fails t unless parse reads body exactly as ref does:
// the same response, and an error from both or from neither.
func SameAsReference(t testing.TB, body []byte, parse, ref func([]byte) (wire.Response, error)) {
	t.Helper()
	got, err := parse(body)
	want, werr := ref(body)
	if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q:\n got %+v, %v\nwant %+v, %v", body, got, err, want, werr)
	}
}
