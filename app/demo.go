package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/demo"
)

// Demo starts a scripted model and the gateway in-process on loopback and
// runs the scripted agents through it: no key, no network, a few seconds.
func Demo(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	model := &demo.Model{}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	msrv := &http.Server{Handler: model, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = msrv.Serve(ml) }()
	defer msrv.Close()

	dir, err := os.MkdirTemp("", "haltline-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL = "http://" + ml.Addr().String()
	cfg.Providers.Anthropic.BaseURL = "http://" + ml.Addr().String()
	cfg.Store.DataDir = dir
	g, err := Start(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer g.Close(context.Background())
	fmt.Fprintf(out, "Haltline demo: gateway on %s (control plane %s), scripted model on %s\n",
		g.DataAddr, g.AdminAddr, ml.Addr())
	if err := demo.Run(ctx, out, "http://"+g.DataAddr, "http://"+g.AdminAddr, demo.Agents); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nThe scripted model answered %d calls.\n", model.Calls())
	return nil
}
