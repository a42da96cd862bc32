package pebblestore_test

import (
	"testing"

	"github.com/haltline/haltline/store/pebblestore"
	"github.com/haltline/haltline/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(dir string) (storetest.Store, error) { return pebblestore.Open(dir, pebblestore.Options{}) })
}
