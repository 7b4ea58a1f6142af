// STREAM-like triad (McCalpin): a = b + 3c over three 400 MB float64 arrays, best of 5; the memory
// bandwidth for the floors in bench/RESULTS.md section 36. gcc -O2 -fopenmp bench/mem_triad.c -o triad;
// OMP_NUM_THREADS=1 ./triad; OMP_NUM_THREADS=2 ./triad
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
int main(){ size_t n=50u<<20; double *a=malloc(n*8),*b=malloc(n*8),*c=malloc(n*8);
#pragma omp parallel for
for(size_t i=0;i<n;i++){a[i]=0;b[i]=1;c[i]=2;}
double best=1e9; for(int r=0;r<5;r++){ double t=omp_get_wtime();
#pragma omp parallel for
for(size_t i=0;i<n;i++) a[i]=b[i]+3.0*c[i];
t=omp_get_wtime()-t; if(t<best)best=t;}
printf("threads %d triad %.2f GB/s (best of 5, 3 x %zu MB)\n",omp_get_max_threads(),3.0*n*8/best/1e9,n*8>>20); return a[7]>0?0:1;}
