# Exit statuses of commands for make: $(call exit-with,FILE) in a recipe ends make with
# the exit status written in FILE, so that `make run` exits with krunbox's code (125:
# this host cannot start VMs) rather than make's own 2. GNU make exits with 0, 1 or 2
# only; the plugin makeexit.c ($(exit-status CODE)) ends it with CODE. Where make has
# no plugins (no load: GNU make before 4.0, as macOS has) or no C compiler, the recipe
# fails with the code instead, and make exits with 2 saying "Error CODE".
#
# Include it with MAKEEXIT_SO set to where the plugin is built, and MAKEEXIT_GOALS to
# the goals that use it (the plugin is built and loaded only when one is asked for).

ifneq ($(filter $(MAKEEXIT_GOALS),$(MAKECMDGOALS)),)
ifneq ($(filter load,$(.FEATURES)),)
-load $(MAKEEXIT_SO)
endif
endif

$(MAKEEXIT_SO): $(dir $(lastword $(MAKEFILE_LIST)))makeexit.c
	@mkdir -p $(dir $@)
	@$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $< 2>/dev/null || echo "make: no exit-status plugin ($@ does not build): make exits with 2 when a command fails"

# exit-with: the recipe text that ends make with the status in FILE ($1).
exit-with = @$(exit-status $(file <$1))exit "$$(cat $1)"
