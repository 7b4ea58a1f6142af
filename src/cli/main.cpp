// placeholder until the CLI lands
#include <cstdio>
int main() { std::puts("scurry " SCURRY_VERSION); return 0; }
