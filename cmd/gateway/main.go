// Command gateway is Haltline: see app.Main.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/haltline/haltline/app"
)

func main() {
	if err := app.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(app.ExitCode(err))
	}
}
