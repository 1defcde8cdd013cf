from .cli.process_exit import main

main()
