package store_test

import (
	"testing"

	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(dir string) (storetest.Store, error) { return store.OpenBolt(dir) })
}
