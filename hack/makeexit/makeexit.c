// makeexit: a GNU make plugin (the load directive) with one function,
// $(exit-status CODE), which ends make with exit status CODE when CODE is
// 1 to 255 and expands to nothing when it is 0. GNU make itself exits with
// 0, 1 or 2 only; make run uses it to exit with krunbox's own code (125:
// this host cannot start VMs), as `krunbox run` does. See makeexit.mk.
#include <stdio.h>
#include <stdlib.h>

#include <gnumake.h>

int plugin_is_GPL_compatible;

static char *exit_status(const char *name, unsigned int argc, char **argv)
{
	(void)name;
	(void)argc;
	char *end;
	long code = strtol(argv[0], &end, 10);
	if (argv[0][0] == '\0' || *end != '\0' || code < 0 || code > 255) {
		fprintf(stderr, "make: $(exit-status %s): want a number from 0 to 255\n", argv[0]);
		code = 2;
	}
	if (code == 0)
		return NULL;
	fflush(stdout);
	fflush(stderr);
	exit((int)code);
}

// makeexit_gmk_setup is called by load (make 4.4 passes an ABI version
// before the location; neither is used).
int makeexit_gmk_setup(const gmk_floc *floc)
{
	(void)floc;
	gmk_add_function("exit-status", exit_status, 1, 1, GMK_FUNC_DEFAULT);
	return 1;
}
