package diskstore_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/diskstore"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := diskstore.DefaultConfig() // fsync always: nothing acknowledged is lost
	cfg.Dir = dir
	store, err := diskstore.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	eng := engine.New(store)
	perMinute := engine.Window{Key: "login", Kind: algo.KindLog, Limit: 2, WindowMs: 60_000}
	var out engine.StepResult
	for range 3 {
		if err := eng.Apply(context.Background(), "user-7f3a", &out, engine.Hit(1, perMinute)); err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Results[0].Allowed, out.Results[0].Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}
