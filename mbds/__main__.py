from mbds.cli import main

main()
