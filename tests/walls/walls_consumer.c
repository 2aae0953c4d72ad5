/* walls_consumer.c - the source of walls_consumer (CMakeLists.txt), a
 * target never built: it exists so that CMake computes the include path a
 * file outside every room gets from the product's libraries, which
 * walls.py compiles its probes with. */
int walls_consumer;
