package main

import (
	"os"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }
